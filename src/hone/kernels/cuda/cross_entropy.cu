#include "hone/kernels/cuda/cross_entropy.hpp"

#include "hone/kernels/cuda/common.cuh"

namespace hone::kernels::cuda {

namespace {

constexpr int kThreads = 512;  // one block per row of the vocabulary

// (max, Σ exp(x - max)) pairs merge exactly like the CPU's chunked online softmax.
__device__ void merge(float& max, float& sum, float other_max, float other_sum) {
  if (other_max == -INFINITY) return;
  if (other_max > max) {
    sum = sum * expf(max - other_max) + other_sum;
    max = other_max;
  } else {
    sum += other_sum * expf(other_max - max);
  }
}

// Threads take kWidth consecutive logits at a time (common.cuh's groups): the
// group's max, then its sum of exp relative to that max, merged into the
// thread's running (max, sum), as the CPU does with its chunks. Rows lie `ld`
// elements apart; the groups cover the padding past `vocab`, which counts as -inf.
template <typename T, int kWidth>
__global__ void cross_entropy_forward_kernel(const T* logits, const int32_t* targets, float* losses, float* lse,
                                             int64_t vocab, int64_t ld, int32_t ignore_index, int64_t first) {
  __shared__ float shared_max[kThreads / kWarpSize], shared_sum[kThreads / kWarpSize];
  const T* z = logits + int64_t(blockIdx.x) * ld;
  float max = -INFINITY, sum = 0;
  HONE_COLUMN_STRIDE(g, ld / kWidth) {
    const auto v = load_elements<kWidth>(z + g * kWidth);
    float x[kWidth];
#pragma unroll
    for (int k = 0; k < kWidth; ++k) x[k] = g * kWidth + k < vocab ? to_f32(v.v[k]) : -INFINITY;
    float group_max = -INFINITY, group_sum = 0;
#pragma unroll
    for (int k = 0; k < kWidth; ++k) group_max = fmaxf(group_max, x[k]);
    if (group_max == -INFINITY) continue;  // all padding
#pragma unroll
    for (int k = 0; k < kWidth; ++k) group_sum += expf(x[k] - group_max);
    merge(max, sum, group_max, group_sum);
  }
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    merge(max, sum, shuffle_xor(max, offset), shuffle_xor(sum, offset));
  }
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  if (lane == 0) {
    shared_max[warp] = max;
    shared_sum[warp] = sum;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  max = shared_max[0];
  sum = shared_sum[0];
  for (int w = 1; w < kThreads / kWarpSize; ++w) merge(max, sum, shared_max[w], shared_sum[w]);
  const float l = max + logf(sum);
  lse[blockIdx.x] = l;
  // Not held (another part's class; or a bad target, which the totals report): logit 0.
  const int64_t target = int64_t(targets[blockIdx.x]) - first;
  const bool held = target >= 0 && target < vocab;
  losses[blockIdx.x] = targets[blockIdx.x] == ignore_index ? 0.0f : l - (held ? to_f32(z[target]) : 0.0f);
}

struct Totals {
  double sum;
  long long tokens;
  unsigned long long bad_row;
};

// One block: Σ losses in double, counts, the first bad row; fixed order, so deterministic.
__global__ void loss_totals_kernel(const float* losses, const int32_t* targets, int64_t rows, int64_t classes,
                                   int32_t ignore_index, Totals* out) {
  __shared__ double scratch[kThreads / kWarpSize];
  __shared__ unsigned long long first_bad;
  if (threadIdx.x == 0) first_bad = ~0ull;
  __syncthreads();
  double sum = 0, tokens = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int32_t t = targets[r];
    if (t == ignore_index) continue;
    if (t < 0 || t >= classes) {
      atomicMin(&first_bad, static_cast<unsigned long long>(r));
      continue;
    }
    sum += losses[r];
    tokens += 1;
  }
  sum = block_sum(sum, scratch);
  tokens = block_sum(tokens, scratch);
  if (threadIdx.x == 0) *out = Totals{sum, static_cast<long long>(tokens), first_bad};
}

// The padding past `vocab` in each group becomes 0.
template <typename T, int kWidth>
__global__ void cross_entropy_backward_kernel(T* logits, const int32_t* targets, const float* lse, float scale,
                                              int64_t vocab, int64_t ld, int32_t ignore_index, int64_t first,
                                              const float* row_weights) {
  T* z = logits + int64_t(blockIdx.x) * ld;
  if (row_weights) scale *= row_weights[blockIdx.x];
  const int64_t target = int64_t(targets[blockIdx.x]) - first;  // a column only where this part holds it
  const bool ignored = targets[blockIdx.x] == ignore_index;
  const float l = lse[blockIdx.x];
  HONE_COLUMN_STRIDE(g, ld / kWidth) {
    auto v = load_elements<kWidth>(z + g * kWidth);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      const int64_t column = g * kWidth + k;
      const float p = expf(to_f32(v.v[k]) - l);
      v.v[k] = from_f32<T>(ignored || column >= vocab ? 0.0f : scale * (column == target ? p - 1.0f : p));
    }
    store_elements(z + g * kWidth, v);
  }
}

}  // namespace

template <typename T>
LossTotals cross_entropy_forward(const T* logits, const int32_t* targets, float* losses, float* lse, int64_t rows,
                                 int64_t vocab, int64_t ld, int32_t ignore_index, int64_t first, int64_t classes) {
  if (rows == 0) return {};
  with_group_width<T>(wide_groups_fit<T>(ld, {logits}), [&]<int kWidth>() {
    HONE_LAUNCH(unsigned(rows), kThreads, 0, cross_entropy_forward_kernel<T, kWidth>)(
        logits, targets, losses, lse, vocab, ld, ignore_index, first);
  });
  HONE_CUDA_LAUNCHED("cross_entropy_forward");
  DeviceBuffer totals(sizeof(Totals));
  HONE_LAUNCH(1, kThreads, 0, loss_totals_kernel)(losses, targets, rows, classes, ignore_index, totals.as<Totals>());
  HONE_CUDA_LAUNCHED("cross_entropy_forward (totals)");
  Totals host{};
  copy_to_host(&host, totals.as<void>(), sizeof host);
  LossTotals result;
  result.sum = host.sum;
  result.tokens = host.tokens;
  if (host.bad_row != ~0ull) {
    result.bad_row = int64_t(host.bad_row);
    copy_to_host(&result.bad_target, targets + host.bad_row, sizeof result.bad_target);
  }
  return result;
}

template <typename T>
void cross_entropy_backward(T* logits, const int32_t* targets, const float* lse, double scale, int64_t rows,
                            int64_t vocab, int64_t ld, int32_t ignore_index, int64_t first,
                            const float* row_weights) {
  if (rows == 0) return;
  with_group_width<T>(wide_groups_fit<T>(ld, {logits}), [&]<int kWidth>() {
    HONE_LAUNCH(unsigned(rows), kThreads, 0, cross_entropy_backward_kernel<T, kWidth>)(
        logits, targets, lse, float(scale), vocab, ld, ignore_index, first, row_weights);
  });
  HONE_CUDA_LAUNCHED("cross_entropy_backward");
}

#define HONE_INSTANTIATE(T)                                                                                   \
  template LossTotals cross_entropy_forward<T>(const T*, const int32_t*, float*, float*, int64_t, int64_t,    \
                                               int64_t, int32_t, int64_t, int64_t);                           \
  template void cross_entropy_backward<T>(T*, const int32_t*, const float*, double, int64_t, int64_t, int64_t, \
                                          int32_t, int64_t, const float*);
HONE_INSTANTIATE(float)
HONE_INSTANTIATE(bf16)
#undef HONE_INSTANTIATE

}  // namespace hone::kernels::cuda
