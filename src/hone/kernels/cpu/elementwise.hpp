#pragma once
// Element-wise kernels: residual add, bias, scaling, dtype casts, squared norms.
#include <cstdint>

#include "hone/core/dtype.hpp"

namespace hone::kernels::cpu {

// out = a + b (out may alias a or b). The backward of a residual add passes the
// output gradient unchanged to both inputs, which callers do by accumulating.
template <typename T>
void add(const T* a, const T* b, T* out, int64_t n);
// x += y
template <typename T>
void add_inplace(T* x, const T* y, int64_t n);
template <typename T>
void scale_inplace(T* x, int64_t n, double factor);
// Element-wise conversion between storage types (f32 <-> bf16, f64 <-> f32).
template <typename From, typename To>
void cast(const From* src, To* dst, int64_t n);
// y[row, :] += bias (a linear layer's bias; bias holds master weights).
template <typename T>
void add_bias(T* y, const compute_t<T>* bias, int64_t rows, int64_t cols);
// d_bias += Σ_rows dy[row, :], deterministic for any thread count.
template <typename T>
void bias_backward(const T* dy, compute_t<T>* d_bias, int64_t rows, int64_t cols);
// Σ x² in double, deterministic for any thread count.
template <typename T>
double sum_squares(const T* x, int64_t n);

}  // namespace hone::kernels::cpu
