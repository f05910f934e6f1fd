#include "hone/kernels/cuda/norm.hpp"

#include "hone/kernels/cuda/common.cuh"
#include "hone/kernels/cuda/reduce.cuh"

namespace hone::kernels::cuda {

namespace {

constexpr int kThreads = 256;  // one block per row, at most

// A row's block: a thread a group, in whole warps, at most kThreads. At 256
// threads GPT-2's rows of 768 (96 groups of 8 bf16) left 160 threads idle, and
// an SM holds at most 8 such blocks: 768 threads loading where 2048 can.
int row_threads(int64_t groups) {
  const int64_t warps = (groups + kWarpSize - 1) / kWarpSize;
  return int(warps < 1 ? kWarpSize : warps * kWarpSize < kThreads ? warps * kWarpSize : kThreads);
}

// LayerNorm and RMSNorm in one pair of kernels: RMSNorm is LayerNorm without
// centring (kCentered false: μ = 0) and without a bias. Each thread takes
// groups of kWidth consecutive elements of the block's row (common.cuh's
// 16-byte groups, or single elements), the f32 weights and biases beside them
// likewise; g is a group's index, g * kWidth its first column.
template <typename T, int kWidth, bool kCentered>
__global__ void norm_forward_kernel(const T* x, const T* branch, T* sum, const float* weight, const float* bias, T* y,
                                    float* mean, float* rstd, int64_t dim, float eps) {
  __shared__ float scratch[kThreads / kWarpSize];
  const int64_t offset = int64_t(blockIdx.x) * dim;
  // The first pass reads x, or with a residual add x + branch, which it writes
  // to sum for the passes after it: each thread rereads only the groups it
  // wrote itself (the same g in every pass), so no barrier is needed.
  const T* input = branch ? sum : x;
  const auto first_read = [&](int64_t at) {
    auto v = load_elements<kWidth>(x + at);
    if (branch) {
      const auto b = load_elements<kWidth>(branch + at);
#pragma unroll
      for (int k = 0; k < kWidth; ++k) v.v[k] = from_f32<T>(to_f32(v.v[k]) + to_f32(b.v[k]));
      store_elements(sum + at, v);
    }
    return v;
  };
  float mu = 0;
  if constexpr (kCentered) {
    float total = 0;
    HONE_COLUMN_STRIDE(g, dim / kWidth) {
      const auto v = first_read(offset + g * kWidth);
#pragma unroll
      for (int k = 0; k < kWidth; ++k) total += to_f32(v.v[k]);
    }
    mu = block_sum(total, scratch) / float(dim);
  }
  float sum_sq = 0;  // two passes for LayerNorm, as on the CPU: exact variance for values far from 0
  HONE_COLUMN_STRIDE(g, dim / kWidth) {
    const int64_t at = offset + g * kWidth;
    const auto v = kCentered ? load_elements<kWidth>(input + at) : first_read(at);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) sum_sq += (to_f32(v.v[k]) - mu) * (to_f32(v.v[k]) - mu);
  }
  const float r = 1.0f / sqrtf(block_sum(sum_sq, scratch) / float(dim) + eps);
  if (threadIdx.x == 0) {
    if constexpr (kCentered) mean[blockIdx.x] = mu;
    rstd[blockIdx.x] = r;
  }
  HONE_COLUMN_STRIDE(g, dim / kWidth) {
    const auto v = load_elements<kWidth>(input + offset + g * kWidth);
    float w[kWidth], b[kWidth] = {};
    load_floats(weight + g * kWidth, w);
    if (bias) load_floats(bias + g * kWidth, b);
    Elements<T, kWidth> out;
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      const float value = (to_f32(v.v[k]) - mu) * r * w[k];
      out.v[k] = from_f32<T>(bias ? value + b[k] : value);
    }
    store_elements(y + offset + g * kWidth, out);
  }
}

// dx += r · (dy·w − mean(dy·w) − x̂ · mean(dy·w·x̂)) with x̂ = (x − μ) · r; for
// RMSNorm μ = 0 and the mean(dy·w) term drops out.
template <typename T, int kWidth, bool kCentered>
__global__ void norm_backward_kernel(const T* dy, const T* x, const float* weight, const float* mean,
                                     const float* rstd, T* dx, int64_t dim) {
  __shared__ float scratch[kThreads / kWarpSize];
  const int64_t offset = int64_t(blockIdx.x) * dim;
  const float mu = kCentered ? mean[blockIdx.x] : 0.0f, r = rstd[blockIdx.x];
  float sum_g = 0, sum_gx = 0;  // Σ (dy·w) and Σ (dy·w)·x̂
  HONE_COLUMN_STRIDE(g, dim / kWidth) {
    const auto d = load_elements<kWidth>(dy + offset + g * kWidth), v = load_elements<kWidth>(x + offset + g * kWidth);
    float w[kWidth];
    load_floats(weight + g * kWidth, w);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      const float gk = to_f32(d.v[k]) * w[k];
      if constexpr (kCentered) sum_g += gk;
      sum_gx += gk * (to_f32(v.v[k]) - mu) * r;
    }
  }
  const float mean_g = kCentered ? block_sum(sum_g, scratch) / float(dim) : 0.0f;
  const float mean_gx = block_sum(sum_gx, scratch) / float(dim);
  HONE_COLUMN_STRIDE(g, dim / kWidth) {
    const int64_t at = offset + g * kWidth;
    const auto d = load_elements<kWidth>(dy + at), v = load_elements<kWidth>(x + at);
    auto out = load_elements<kWidth>(dx + at);
    float w[kWidth];
    load_floats(weight + g * kWidth, w);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      const float xhat = (to_f32(v.v[k]) - mu) * r;
      out.v[k] = from_f32<T>(to_f32(out.v[k]) + r * (to_f32(d.v[k]) * w[k] - mean_g - xhat * mean_gx));
    }
    store_elements(dx + at, out);
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
void rmsnorm_forward(const T* x, const T* branch, T* sum, const float* weight, T* y, float* rstd, int64_t rows,
                     int64_t dim, double eps) {
  if (rows == 0) return;
  with_group_width<T>(wide_groups_fit<T>(dim, {x, branch, sum, weight, y}), [&]<int kWidth>() {
    HONE_LAUNCH(unsigned(rows), row_threads(dim / kWidth), 0, norm_forward_kernel<T, kWidth, false>)(
        x, branch, sum, weight, nullptr, y, nullptr, rstd, dim, float(eps));
  });
  HONE_CUDA_LAUNCHED("rmsnorm_forward");
}

template <typename T>
void rmsnorm_backward(const T* dy, const T* x, const float* weight, const float* rstd, T* dx, float* d_weight,
                      int64_t rows, int64_t dim) {
  if (rows == 0) return;
  with_group_width<T>(wide_groups_fit<T>(dim, {dy, x, weight, dx}), [&]<int kWidth>() {
    HONE_LAUNCH(unsigned(rows), row_threads(dim / kWidth), 0, norm_backward_kernel<T, kWidth, false>)(
        dy, x, weight, nullptr, rstd, dx, dim);
  });
  HONE_CUDA_LAUNCHED("rmsnorm_backward");
  if (d_weight != nullptr) accumulate_columns(RmsWeightTerm<T>{dy, x, rstd, dim}, rows, dim, d_weight);
}

template <typename T>
void layernorm_forward(const T* x, const T* branch, T* sum, const float* weight, const float* bias, T* y, float* mean,
                       float* rstd, int64_t rows, int64_t dim, double eps) {
  if (rows == 0) return;
  with_group_width<T>(wide_groups_fit<T>(dim, {x, branch, sum, weight, bias, y}), [&]<int kWidth>() {
    HONE_LAUNCH(unsigned(rows), row_threads(dim / kWidth), 0, norm_forward_kernel<T, kWidth, true>)(
        x, branch, sum, weight, bias, y, mean, rstd, dim, float(eps));
  });
  HONE_CUDA_LAUNCHED("layernorm_forward");
}

template <typename T>
void layernorm_backward(const T* dy, const T* x, const float* weight, const float* mean, const float* rstd, T* dx,
                        float* d_weight, float* d_bias, int64_t rows, int64_t dim) {
  if (rows == 0) return;
  with_group_width<T>(wide_groups_fit<T>(dim, {dy, x, weight, dx}), [&]<int kWidth>() {
    HONE_LAUNCH(unsigned(rows), row_threads(dim / kWidth), 0, norm_backward_kernel<T, kWidth, true>)(
        dy, x, weight, mean, rstd, dx, dim);
  });
  HONE_CUDA_LAUNCHED("layernorm_backward");
  if (d_weight == nullptr) return;  // frozen weight (and bias)
  const LayerNormParamTerm<T> term{dy, x, mean, rstd, dim};
  if (d_bias != nullptr) accumulate_columns(term, rows, 2 * dim, d_weight, dim, d_bias);
  else accumulate_columns(term, rows, dim, d_weight);
}

#define HONE_INSTANTIATE(T)                                                                                     \
  template void rmsnorm_forward<T>(const T*, const T*, T*, const float*, T*, float*, int64_t, int64_t, double);  \
  template void rmsnorm_backward<T>(const T*, const T*, const float*, const float*, T*, float*, int64_t,        \
                                    int64_t);                                                                   \
  template void layernorm_forward<T>(const T*, const T*, T*, const float*, const float*, T*, float*, float*,     \
                                     int64_t, int64_t, double);                                                 \
  template void layernorm_backward<T>(const T*, const T*, const float*, const float*, const float*, T*, float*,  \
                                      float*, int64_t, int64_t);
HONE_INSTANTIATE(float)
HONE_INSTANTIATE(bf16)
#undef HONE_INSTANTIATE

}  // namespace hone::kernels::cuda
