#pragma once
// Element-wise CUDA kernels with the semantics of kernels/cpu/elementwise.hpp:
// residual add, scaling, dtype casts, bias, dropout (the same Philox masks as
// the CPU), LoRA column blocks, squared norms. T is float or bf16; all pointers
// are device memory.
#include <cstdint>

#include "hone/core/dtype.hpp"

namespace hone::kernels::cuda {

template <typename T>
void add(const T* a, const T* b, T* out, int64_t n);
template <typename T>
void scale_inplace(T* x, int64_t n, double factor);
// f32 <-> bf16, f16 (bit exact, as the CPU's) or f64; the same dtype copies.
void cast(const void* src, DType from, void* dst, DType to, int64_t n);
template <typename T>
void add_bias(T* y, const float* bias, int64_t rows, int64_t cols);
// d_bias += Σ_rows dy (deterministic).
template <typename T>
void bias_backward(const T* dy, float* d_bias, int64_t rows, int64_t cols);
template <typename T>
void dropout(const T* x, T* out, int64_t n, double p, uint64_t seed, uint64_t stream, int64_t first = 0);
template <typename T>
void add_scaled_columns(T* dst, int64_t width, int64_t col, const T* src, int64_t rows, int64_t cols, double scale);
template <typename T>
void copy_scaled_columns(const T* src, int64_t width, int64_t col, T* dst, int64_t rows, int64_t cols, double scale);
// Σ x² in double, deterministic; waits for the result.
template <typename T>
double sum_squares(const T* x, int64_t n);

}  // namespace hone::kernels::cuda
