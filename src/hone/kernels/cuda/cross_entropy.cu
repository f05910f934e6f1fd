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

// The row's logsumexp, returned to thread 0 (the other threads get 0). Threads
// take kWidth consecutive logits at a time (common.cuh's groups): the group's
// max, then its sum of exp relative to that max, merged into the thread's
// running (max, sum), as the CPU does with its chunks. The groups cover the
// padding past `vocab` (rows `ld` elements long), which counts as -inf.
template <typename T, int kWidth>
__device__ float row_logsumexp(const T* z, int64_t vocab, int64_t ld) {
  __shared__ float shared_max[kThreads / kWarpSize], shared_sum[kThreads / kWarpSize];
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
  if (threadIdx.x != 0) return 0;
  max = shared_max[0];
  sum = shared_sum[0];
  for (int w = 1; w < kThreads / kWarpSize; ++w) merge(max, sum, shared_max[w], shared_sum[w]);
  return max + logf(sum);
}

// Thread 0's part: the row's lse and loss. Not held (another part's class; or a
// bad target, which the totals report): logit 0.
template <typename T>
__device__ void write_row_loss(float l, const T* z, const int32_t* targets, float* losses, float* lse, int64_t vocab,
                               int32_t ignore_index, int64_t first) {
  lse[blockIdx.x] = l;
  const int64_t target = int64_t(targets[blockIdx.x]) - first;
  const bool held = target >= 0 && target < vocab;
  losses[blockIdx.x] = targets[blockIdx.x] == ignore_index ? 0.0f : l - (held ? to_f32(z[target]) : 0.0f);
}

// The gradient of the row `z` (logits), written to `out` (the padding past
// `vocab` in each group becomes 0).
template <typename T, int kWidth>
__device__ void write_row_gradient(const T* z, T* out, float l, const int32_t* targets, float scale, int64_t vocab,
                                   int64_t ld, int32_t ignore_index, int64_t first) {
  const int64_t target = int64_t(targets[blockIdx.x]) - first;  // a column only where this part holds it
  const bool ignored = targets[blockIdx.x] == ignore_index;
  HONE_COLUMN_STRIDE(g, ld / kWidth) {
    auto v = load_elements<kWidth>(z + g * kWidth);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      const int64_t column = g * kWidth + k;
      const float p = expf(to_f32(v.v[k]) - l);
      v.v[k] = from_f32<T>(ignored || column >= vocab ? 0.0f : scale * (column == target ? p - 1.0f : p));
    }
    store_elements(out + g * kWidth, v);
  }
}

template <typename T, int kWidth>
__global__ void cross_entropy_forward_kernel(const T* logits, const int32_t* targets, float* losses, float* lse,
                                             int64_t vocab, int64_t ld, int32_t ignore_index, int64_t first) {
  const T* z = logits + int64_t(blockIdx.x) * ld;
  const float l = row_logsumexp<T, kWidth>(z, vocab, ld);
  if (threadIdx.x == 0) write_row_loss(l, z, targets, losses, lse, vocab, ignore_index, first);
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

template <typename T, int kWidth>
__global__ void cross_entropy_backward_kernel(T* logits, const int32_t* targets, const float* lse, float scale,
                                              int64_t vocab, int64_t ld, int32_t ignore_index, int64_t first,
                                              const float* row_weights) {
  T* z = logits + int64_t(blockIdx.x) * ld;
  if (row_weights) scale *= row_weights[blockIdx.x];
  write_row_gradient<T, kWidth>(z, z, lse[blockIdx.x], targets, scale, vocab, ld, ignore_index, first);
}

// Both passes in one kernel, the row held in shared memory between them: the
// logits are read from memory once instead of twice. The same arithmetic in
// the same order as the two kernels, so the same bits. Two blocks an SM (a
// GPT-2 row is 100 KB of its 228), at most 64 registers a thread: while one
// block computes, the other streams its row.
template <typename T, int kWidth>
__global__ void __launch_bounds__(kThreads, 2)
    cross_entropy_fused_kernel(T* logits, const int32_t* targets, float* losses, float* lse, float scale,
                               int64_t vocab, int64_t ld, int32_t ignore_index) {
  __shared__ float row_lse;
  T* z = logits + int64_t(blockIdx.x) * ld;
  T* row = dynamic_shared<T>();
  // kInFlight groups loaded before any is stored: the compiler cannot tell the
  // row in shared memory from the logits, so a load after a store waits for it.
  constexpr int kInFlight = 4;
  const int64_t groups = ld / kWidth;
  for (int64_t first = threadIdx.x; first < groups; first += kInFlight * blockDim.x) {
    Elements<T, kWidth> v[kInFlight];
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      const int64_t g = first + i * blockDim.x;
      if (g < groups) v[i] = load_elements<kWidth>(z + g * kWidth);
    }
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      const int64_t g = first + i * blockDim.x;
      if (g < groups) store_elements(row + g * kWidth, v[i]);
    }
  }
  __syncthreads();
  const float l = row_logsumexp<T, kWidth>(row, vocab, ld);
  if (threadIdx.x == 0) {
    write_row_loss(l, row, targets, losses, lse, vocab, ignore_index, 0);
    row_lse = l;
  }
  __syncthreads();
  write_row_gradient<T, kWidth>(row, z, row_lse, targets, scale, vocab, ld, ignore_index, 0);
}

// The losses' sum and count and the first bad target, read back to the host.
LossTotals loss_totals(const float* losses, const int32_t* targets, int64_t rows, int64_t classes,
                       int32_t ignore_index) {
  DeviceBuffer totals(sizeof(Totals));
  HONE_LAUNCH(1, kThreads, 0, loss_totals_kernel)(losses, targets, rows, classes, ignore_index, totals.as<Totals>());
  HONE_CUDA_LAUNCHED("cross_entropy (totals)");
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
  return loss_totals(losses, targets, rows, classes, ignore_index);
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

template <typename T>
LossTotals cross_entropy_forward_backward(T* logits, const int32_t* targets, float* losses, float* lse, double scale,
                                          int64_t rows, int64_t vocab, int64_t ld, int32_t ignore_index) {
  if (rows == 0) return {};
  const size_t row_bytes = size_t(ld) * sizeof(T);
  if (row_bytes > max_shared_memory_per_block() - 1024) {  // the kernel's own shared memory is a few bytes
    const LossTotals totals = cross_entropy_forward(logits, targets, losses, lse, rows, vocab, ld, ignore_index, 0,
                                                    vocab);
    cross_entropy_backward(logits, targets, lse, scale, rows, vocab, ld, ignore_index, 0);
    return totals;
  }
  with_group_width<T>(wide_groups_fit<T>(ld, {logits}), [&]<int kWidth>() {
    const auto kernel = cross_entropy_fused_kernel<T, kWidth>;
    HONE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(row_bytes)));
    HONE_LAUNCH(unsigned(rows), kThreads, row_bytes, cross_entropy_fused_kernel<T, kWidth>)(
        logits, targets, losses, lse, float(scale), vocab, ld, ignore_index);
  });
  HONE_CUDA_LAUNCHED("cross_entropy_forward_backward");
  return loss_totals(losses, targets, rows, vocab, ignore_index);
}

#define HONE_INSTANTIATE(T)                                                                                   \
  template LossTotals cross_entropy_forward<T>(const T*, const int32_t*, float*, float*, int64_t, int64_t,    \
                                               int64_t, int32_t, int64_t, int64_t);                           \
  template void cross_entropy_backward<T>(T*, const int32_t*, const float*, double, int64_t, int64_t, int64_t, \
                                          int32_t, int64_t, const float*);                                    \
  template LossTotals cross_entropy_forward_backward<T>(T*, const int32_t*, float*, float*, double, int64_t,  \
                                                        int64_t, int64_t, int32_t);
HONE_INSTANTIATE(float)
HONE_INSTANTIATE(bf16)
#undef HONE_INSTANTIATE

}  // namespace hone::kernels::cuda
