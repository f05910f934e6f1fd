#pragma once
// RMSNorm and LayerNorm over the last dimension on the GPU, with the semantics
// of kernels/cpu/norm.hpp: statistics kept for the backward pass, which
// accumulates into dx and the (deterministic) weight and bias gradients.
#include <cstdint>

#include "hone/core/dtype.hpp"

namespace hone::kernels::cuda {

// The forward passes normalize x, or where branch is not null x + branch
// rounded to T and written to sum (which may be x): the residual add before a norm.
template <typename T>
void rmsnorm_forward(const T* x, const T* branch, T* sum, const float* weight, T* y, float* rstd, int64_t rows,
                     int64_t dim, double eps);
// d_weight null: a frozen weight.
template <typename T>
void rmsnorm_backward(const T* dy, const T* x, const float* weight, const float* rstd, T* dx, float* d_weight,
                      int64_t rows, int64_t dim);
// bias may be null.
template <typename T>
void layernorm_forward(const T* x, const T* branch, T* sum, const float* weight, const float* bias, T* y, float* mean,
                       float* rstd, int64_t rows, int64_t dim, double eps);
template <typename T>
void layernorm_backward(const T* dy, const T* x, const float* weight, const float* mean, const float* rstd, T* dx,
                        float* d_weight, float* d_bias, int64_t rows, int64_t dim);

}  // namespace hone::kernels::cuda
