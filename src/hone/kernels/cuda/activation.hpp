#pragma once
// SwiGLU and GELU (exact or tanh) on the GPU, with the semantics of
// kernels/cpu/activation.hpp. T is float or bf16; pointers are device memory.
#include <cstdint>

#include "hone/kernels/cpu/activation.hpp"

namespace hone::kernels::cuda {

using cpu::GeluApproximation;

template <typename T>
void swiglu_forward(const T* gate_up, T* out, int64_t rows, int64_t hidden);
template <typename T>
void swiglu_backward(const T* d_out, const T* gate_up, T* d_gate_up, int64_t rows, int64_t hidden);
template <typename T>
void gelu_forward(const T* x, T* y, int64_t n, GeluApproximation approximation);
// dx may alias dy.
template <typename T>
void gelu_backward(const T* dy, const T* x, T* dx, int64_t n, GeluApproximation approximation);

}  // namespace hone::kernels::cuda
