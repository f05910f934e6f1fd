#include "hone/kernels/cuda/norm.hpp"

#include "hone/kernels/cuda/common.cuh"
#include "hone/kernels/cuda/reduce.cuh"

namespace hone::kernels::cuda {

namespace {

constexpr int kThreads = 256;  // one block per row

template <typename T>
__global__ void rmsnorm_forward_kernel(const T* x, const float* weight, T* y, float* rstd, int64_t dim, float eps) {
  __shared__ float scratch[kThreads / kWarpSize];
  const T* xr = x + int64_t(blockIdx.x) * dim;
  T* yr = y + int64_t(blockIdx.x) * dim;
  float sum_sq = 0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) sum_sq += to_f32(xr[j]) * to_f32(xr[j]);
  const float r = 1.0f / sqrtf(block_sum(sum_sq, scratch) / float(dim) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) yr[j] = from_f32<T>(to_f32(xr[j]) * r * weight[j]);
}

template <typename T>
__global__ void rmsnorm_backward_kernel(const T* dy, const T* x, const float* weight, const float* rstd, T* dx,
                                        int64_t dim) {
  __shared__ float scratch[kThreads / kWarpSize];
  const int64_t offset = int64_t(blockIdx.x) * dim;
  const float r = rstd[blockIdx.x];
  float dot = 0;  // Σ_j (dy·w)_j · x̂_j
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) dot += to_f32(dy[offset + j]) * weight[j] * to_f32(x[offset + j]) * r;
  dot = block_sum(dot, scratch) / float(dim);
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    const float xhat = to_f32(x[offset + j]) * r;
    dx[offset + j] = from_f32<T>(to_f32(dx[offset + j]) + r * (to_f32(dy[offset + j]) * weight[j] - xhat * dot));
  }
}

template <typename T>
struct RmsWeightTerm {
  const T* dy;
  const T* x;
  const float* rstd;
  int64_t dim;
  __device__ float operator()(int64_t row, int64_t j) const {
    return to_f32(dy[row * dim + j]) * to_f32(x[row * dim + j]) * rstd[row];
  }
};

template <typename T>
__global__ void layernorm_forward_kernel(const T* x, const float* weight, const float* bias, T* y, float* mean,
                                         float* rstd, int64_t dim, float eps) {
  __shared__ float scratch[kThreads / kWarpSize];
  const T* xr = x + int64_t(blockIdx.x) * dim;
  T* yr = y + int64_t(blockIdx.x) * dim;
  float sum = 0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) sum += to_f32(xr[j]);
  const float mu = block_sum(sum, scratch) / float(dim);
  float sum_sq = 0;  // two passes, as on the CPU: exact variance for values far from 0
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) sum_sq += (to_f32(xr[j]) - mu) * (to_f32(xr[j]) - mu);
  const float r = 1.0f / sqrtf(block_sum(sum_sq, scratch) / float(dim) + eps);
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = mu;
    rstd[blockIdx.x] = r;
  }
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    yr[j] = from_f32<T>((to_f32(xr[j]) - mu) * r * weight[j] + (bias ? bias[j] : 0.0f));
  }
}

template <typename T>
__global__ void layernorm_backward_kernel(const T* dy, const T* x, const float* weight, const float* mean,
                                          const float* rstd, T* dx, int64_t dim) {
  __shared__ float scratch[kThreads / kWarpSize];
  const int64_t offset = int64_t(blockIdx.x) * dim;
  const float mu = mean[blockIdx.x], r = rstd[blockIdx.x];
  float sum_g = 0, sum_gx = 0;  // Σ (dy·w) and Σ (dy·w)·x̂
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    const float g = to_f32(dy[offset + j]) * weight[j];
    sum_g += g;
    sum_gx += g * (to_f32(x[offset + j]) - mu) * r;
  }
  const float mean_g = block_sum(sum_g, scratch) / float(dim);
  const float mean_gx = block_sum(sum_gx, scratch) / float(dim);
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    const float xhat = (to_f32(x[offset + j]) - mu) * r;
    dx[offset + j] =
        from_f32<T>(to_f32(dx[offset + j]) + r * (to_f32(dy[offset + j]) * weight[j] - mean_g - xhat * mean_gx));
  }
}

// Columns [0, dim) the weight gradient's terms, [dim, 2·dim) the bias gradient's.
template <typename T>
struct LayerNormParamTerm {
  const T* dy;
  const T* x;
  const float* mean;
  const float* rstd;
  int64_t dim;
  __device__ float operator()(int64_t row, int64_t col) const {
    if (col >= dim) return to_f32(dy[row * dim + col - dim]);
    return to_f32(dy[row * dim + col]) * (to_f32(x[row * dim + col]) - mean[row]) * rstd[row];
  }
};

}  // namespace

template <typename T>
void rmsnorm_forward(const T* x, const float* weight, T* y, float* rstd, int64_t rows, int64_t dim, double eps) {
  if (rows == 0) return;
  HONE_LAUNCH(unsigned(rows), kThreads, 0, rmsnorm_forward_kernel)(x, weight, y, rstd, dim, float(eps));
  HONE_CUDA_LAUNCHED("rmsnorm_forward");
}

template <typename T>
void rmsnorm_backward(const T* dy, const T* x, const float* weight, const float* rstd, T* dx, float* d_weight,
                      int64_t rows, int64_t dim) {
  if (rows == 0) return;
  HONE_LAUNCH(unsigned(rows), kThreads, 0, rmsnorm_backward_kernel)(dy, x, weight, rstd, dx, dim);
  HONE_CUDA_LAUNCHED("rmsnorm_backward");
  if (d_weight != nullptr) accumulate_columns(RmsWeightTerm<T>{dy, x, rstd, dim}, rows, dim, d_weight);
}

template <typename T>
void layernorm_forward(const T* x, const float* weight, const float* bias, T* y, float* mean, float* rstd,
                       int64_t rows, int64_t dim, double eps) {
  if (rows == 0) return;
  HONE_LAUNCH(unsigned(rows), kThreads, 0, layernorm_forward_kernel)(x, weight, bias, y, mean, rstd, dim, float(eps));
  HONE_CUDA_LAUNCHED("layernorm_forward");
}

template <typename T>
void layernorm_backward(const T* dy, const T* x, const float* weight, const float* mean, const float* rstd, T* dx,
                        float* d_weight, float* d_bias, int64_t rows, int64_t dim) {
  if (rows == 0) return;
  HONE_LAUNCH(unsigned(rows), kThreads, 0, layernorm_backward_kernel)(dy, x, weight, mean, rstd, dx, dim);
  HONE_CUDA_LAUNCHED("layernorm_backward");
  if (d_weight == nullptr) return;  // frozen weight (and bias)
  const LayerNormParamTerm<T> term{dy, x, mean, rstd, dim};
  if (d_bias != nullptr) accumulate_columns(term, rows, 2 * dim, d_weight, dim, d_bias);
  else accumulate_columns(term, rows, dim, d_weight);
}

#define HONE_INSTANTIATE(T)                                                                                     \
  template void rmsnorm_forward<T>(const T*, const float*, T*, float*, int64_t, int64_t, double);               \
  template void rmsnorm_backward<T>(const T*, const T*, const float*, const float*, T*, float*, int64_t,        \
                                    int64_t);                                                                   \
  template void layernorm_forward<T>(const T*, const float*, const float*, T*, float*, float*, int64_t, int64_t, \
                                     double);                                                                   \
  template void layernorm_backward<T>(const T*, const T*, const float*, const float*, const float*, T*, float*,  \
                                      float*, int64_t, int64_t);
HONE_INSTANTIATE(float)
HONE_INSTANTIATE(bf16)
#undef HONE_INSTANTIATE

}  // namespace hone::kernels::cuda
