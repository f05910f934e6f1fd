#pragma once
// RMSNorm (Llama) and LayerNorm with or without bias (GPT-2, MPT), over the last
// dimension of a [rows, dim] matrix. Statistics are kept for the backward pass.
#include <cstdint>

#include "hone/core/dtype.hpp"

namespace hone::kernels::cpu {

// The forward kernels normalize x, or where branch is not null x + branch
// (the residual add before a norm), rounded to T and written to sum (which may
// be x), row by row.
//
// y = x / sqrt(mean(x²) + eps) * weight; rstd[row] = 1 / sqrt(mean(x²) + eps).
template <typename T>
void rmsnorm_forward(const T* x, const T* branch, T* sum, const compute_t<T>* weight, T* y, compute_t<T>* rstd,
                     int64_t rows, int64_t dim, double eps);
// dx += ∂L/∂x and d_weight += ∂L/∂weight (accumulating, as residual streams and
// gradient accumulation need). d_weight null: the weight is frozen.
template <typename T>
void rmsnorm_backward(const T* dy, const T* x, const compute_t<T>* weight, const compute_t<T>* rstd, T* dx,
                      compute_t<T>* d_weight, int64_t rows, int64_t dim);

// y = (x - mean) / sqrt(var + eps) * weight + bias; bias may be null (MPT).
template <typename T>
void layernorm_forward(const T* x, const T* branch, T* sum, const compute_t<T>* weight, const compute_t<T>* bias,
                       T* y, compute_t<T>* mean, compute_t<T>* rstd, int64_t rows, int64_t dim, double eps);
// Accumulates into dx, d_weight and d_bias (d_bias null when there is no bias;
// both null when the norm is frozen).
template <typename T>
void layernorm_backward(const T* dy, const T* x, const compute_t<T>* weight, const compute_t<T>* mean,
                        const compute_t<T>* rstd, T* dx, compute_t<T>* d_weight, compute_t<T>* d_bias, int64_t rows,
                        int64_t dim);

}  // namespace hone::kernels::cpu
