#pragma once
// MLP activations: SwiGLU (Llama) and GELU, exact (MPT) or tanh-approximated (GPT-2).
#include <cstdint>

#include "hone/core/dtype.hpp"

namespace hone::kernels::cpu {

// gate_up is [rows, 2·hidden]: columns [0, hidden) the gate, [hidden, 2·hidden)
// the up projection. out[rows, hidden] = silu(gate) · up.
template <typename T>
void swiglu_forward(const T* gate_up, T* out, int64_t rows, int64_t hidden);
// Writes d_gate_up (not accumulating).
template <typename T>
void swiglu_backward(const T* d_out, const T* gate_up, T* d_gate_up, int64_t rows, int64_t hidden);

enum class GeluApproximation { none, tanh };

template <typename T>
void gelu_forward(const T* x, T* y, int64_t n, GeluApproximation approximation);
// Writes dx (not accumulating); dx may alias dy.
template <typename T>
void gelu_backward(const T* dy, const T* x, T* dx, int64_t n, GeluApproximation approximation);

}  // namespace hone::kernels::cpu
