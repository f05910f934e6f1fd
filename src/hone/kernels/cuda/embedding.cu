#include "hone/kernels/cuda/embedding.hpp"

#include "hone/kernels/cuda/common.cuh"

namespace hone::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr unsigned long long kNone = ~0ull;

// A sample's rows are the block's rows (grid x), samples the grid's z.
template <typename T, typename W>
__global__ void embedding_forward_kernel(const int32_t* tokens, const W* table, int64_t first, int64_t held,
                                         int64_t vocab, const W* positions, T* out, int64_t batch, int64_t seq,
                                         int64_t dim, const int32_t* token_positions,
                                         unsigned long long* first_bad) {
  HONE_SAMPLE_STRIDE(sample, batch) HONE_ROW_STRIDE(t, seq) {
    const int64_t row = sample * seq + t;
    const int32_t token = tokens[row];
    if (token < 0 || token >= vocab) {
      if (threadIdx.x == 0) atomicMin(first_bad, static_cast<unsigned long long>(row));
      continue;
    }
    const int64_t id = int64_t(token) - first;
    const W* embedding = id >= 0 && id < held ? table + id * dim : nullptr;
    const W* position = positions ? positions + (token_positions ? int64_t(token_positions[row]) : t) * dim : nullptr;
    HONE_COLUMN_STRIDE(j, dim) {
      float value = embedding ? to_f32(embedding[j]) : 0.0f;
      if (position) value += to_f32(position[j]);
      out[row * dim + j] = from_f32<T>(value);
    }
  }
}

// The backward pass adds each input row to a table row. Table rows fall into
// kBuckets buckets (row % kBuckets); the input rows are first listed bucket by
// bucket, in their order within each bucket (two kernels: the buckets' sizes,
// then each bucket's rows), and then a thread per (bucket, column) adds its
// bucket's rows in that order. Every table element gets its rows in row order,
// as on the CPU, and no two threads write one place, with no atomics; a thread
// walks its bucket's rows alone (rows / kBuckets of them for ids spread over
// the table), where walking every row per column cost GPT-2 124M 2.3 ms a step.
constexpr int kBuckets = 256;
constexpr int kListThreads = 256;
constexpr int kColumnsPerBlock = kWarpSize;
constexpr int kBucketsPerBlock = kThreads / kColumnsPerBlock;

// The table row input row r adds to, or -1 where the table does not hold it.
// index null: r % seq (learned positions without packing); else index - first
// (the table holds rows [first, first + table_rows)).
__device__ __forceinline__ int64_t table_row(const int32_t* index, int64_t first, int64_t seq, int64_t table_rows,
                                             int64_t r) {
  const int64_t target = index ? int64_t(index[r]) - first : r % seq;
  return target >= 0 && target < table_rows ? target : -1;
}

// Thread t of a block walks input rows [t·span, (t + 1)·span): the threads'
// spans, in thread order, are the rows in order.
struct Span {
  int64_t begin, end;
};
__device__ __forceinline__ Span thread_span(int64_t rows) {
  const int64_t span = (rows + blockDim.x - 1) / blockDim.x;
  const int64_t begin = min(rows, int64_t(threadIdx.x) * span);
  return {begin, min(rows, begin + span)};
}

__device__ __forceinline__ int rows_in_bucket(const int32_t* index, int64_t first, int64_t seq, int64_t table_rows,
                                              Span span, int bucket) {
  int count = 0;
  for (int64_t r = span.begin; r < span.end; ++r) {
    const int64_t target = table_row(index, first, seq, table_rows, r);
    count += target >= 0 && int(target % kBuckets) == bucket;
  }
  return count;
}

// Block b: how many input rows land in bucket b.
__global__ void bucket_sizes_kernel(const int32_t* index, int64_t first, int64_t seq, int64_t table_rows,
                                    int64_t rows, int* sizes) {
  __shared__ int scratch[kListThreads / kWarpSize];
  const int bucket = int(blockIdx.x);
  const int count = block_sum(rows_in_bucket(index, first, seq, table_rows, thread_span(rows), bucket), scratch);
  if (threadIdx.x == 0) sizes[bucket] = count;
}

// Block b: bucket b's input rows, in order, into list[starts[b], starts[b] + sizes[b]),
// starts[b] being the sizes of the buckets before it.
__global__ void bucket_rows_kernel(const int32_t* index, int64_t first, int64_t seq, int64_t table_rows,
                                   int64_t rows, const int* sizes, int* starts, int32_t* list) {
  __shared__ int scratch[kListThreads / kWarpSize];
  __shared__ int thread_start[kListThreads];
  const int bucket = int(blockIdx.x);
  int before = 0;
  for (int b = int(threadIdx.x); b < bucket; b += int(blockDim.x)) before += sizes[b];
  const int start = block_sum(before, scratch);
  // Each thread counts its span's rows again rather than bucket_sizes_kernel
  // keeping every thread's count (kBuckets × kListThreads ints): the index
  // array is a few tens of KB, read from L2.
  const Span span = thread_span(rows);
  thread_start[threadIdx.x] = rows_in_bucket(index, first, seq, table_rows, span, bucket);
  __syncthreads();
  if (threadIdx.x == 0) {  // exclusive prefix sum over the threads' counts
    int sum = start;
    for (int t = 0; t < int(blockDim.x); ++t) {
      const int count = thread_start[t];
      thread_start[t] = sum;
      sum += count;
    }
    starts[bucket] = start;
  }
  __syncthreads();
  int at = thread_start[threadIdx.x];
  for (int64_t r = span.begin; r < span.end; ++r) {
    const int64_t target = table_row(index, first, seq, table_rows, r);
    if (target >= 0 && int(target % kBuckets) == bucket) list[at++] = int32_t(r);
  }
}

// Thread (column j, bucket b) adds column j of bucket b's rows, in order.
template <typename T>
__global__ void scatter_add_rows_kernel(const int32_t* index, int64_t first, int64_t seq, const T* g, float* table,
                                        int64_t table_rows, int64_t dim, const int* sizes, const int* starts,
                                        const int32_t* list) {
  const int64_t j = int64_t(blockIdx.x) * kColumnsPerBlock + threadIdx.x;
  const int bucket = int(blockIdx.y) * kBucketsPerBlock + int(threadIdx.y);
  if (j >= dim) return;
  const int end = starts[bucket] + sizes[bucket];
  for (int i = starts[bucket]; i < end; ++i) {
    const int64_t r = list[i];
    table[table_row(index, first, seq, table_rows, r) * dim + j] += to_f32(g[r * dim + j]);
  }
}

template <typename T>
void scatter_add_rows(const int32_t* index, int64_t first, int64_t seq, const T* g, float* table, int64_t table_rows,
                      int64_t rows, int64_t dim) {
  DeviceBuffer sizes(kBuckets * sizeof(int)), starts(kBuckets * sizeof(int)), list(size_t(rows) * sizeof(int32_t));
  HONE_LAUNCH(kBuckets, kListThreads, 0, bucket_sizes_kernel)(index, first, seq, table_rows, rows, sizes.as<int>());
  HONE_CUDA_LAUNCHED("embedding_backward (bucket sizes)");
  HONE_LAUNCH(kBuckets, kListThreads, 0, bucket_rows_kernel)(index, first, seq, table_rows, rows, sizes.as<int>(),
                                                             starts.as<int>(), list.as<int32_t>());
  HONE_CUDA_LAUNCHED("embedding_backward (bucket rows)");
  const dim3 block(kColumnsPerBlock, kBucketsPerBlock);
  const dim3 grid(unsigned((dim + kColumnsPerBlock - 1) / kColumnsPerBlock), kBuckets / kBucketsPerBlock);
  HONE_LAUNCH(grid, block, 0, scatter_add_rows_kernel<T>)(index, first, seq, g, table, table_rows, dim,
                                                          sizes.as<int>(), starts.as<int>(), list.as<int32_t>());
  HONE_CUDA_LAUNCHED("embedding_backward");
}

}  // namespace

template <typename T, typename W>
BadToken embedding_forward(const int32_t* tokens, const W* table, int64_t first, int64_t held, int64_t vocab,
                           const W* positions, T* out, int64_t batch, int64_t seq, int64_t dim,
                           const int32_t* token_positions) {
  const int64_t rows = batch * seq;
  if (rows * dim == 0) return {};
  DeviceBuffer first_bad(sizeof(unsigned long long));
  HONE_CUDA_CHECK(cudaMemsetAsync(first_bad.as<void>(), 0xff, sizeof(unsigned long long), stream()));
  const RowsLaunch launch = rows_launch(seq, dim, kThreads);
  HONE_LAUNCH(dim3(launch.blocks, 1, samples_grid(batch)), launch.threads, 0, embedding_forward_kernel<T, W>)(
      tokens, table, first, held, vocab, positions, out, batch, seq, dim, token_positions,
      first_bad.as<unsigned long long>());
  HONE_CUDA_LAUNCHED("embedding_forward");
  unsigned long long bad = kNone;
  copy_to_host(&bad, first_bad.as<void>(), sizeof bad);
  if (bad == kNone) return {};
  BadToken result;
  result.index = int64_t(bad);
  copy_to_host(&result.id, tokens + bad, sizeof result.id);
  return result;
}

template <typename T>
void embedding_backward(const int32_t* tokens, const T* d_out, float* d_table, int64_t first, int64_t held,
                        float* d_positions, int64_t n_positions, int64_t batch, int64_t seq, int64_t dim,
                        const int32_t* token_positions) {
  const int64_t rows = batch * seq;
  if (rows * dim == 0) return;
  scatter_add_rows(tokens, first, seq, d_out, d_table, held, rows, dim);
  if (d_positions) scatter_add_rows(token_positions, 0, seq, d_out, d_positions, n_positions, rows, dim);
}

#define HONE_INSTANTIATE_FORWARD(T, W)                                                                         \
  template BadToken embedding_forward<T, W>(const int32_t*, const W*, int64_t, int64_t, int64_t, const W*, T*,  \
                                            int64_t, int64_t, int64_t, const int32_t*);
HONE_INSTANTIATE_FORWARD(float, float)
HONE_INSTANTIATE_FORWARD(bf16, float)
HONE_INSTANTIATE_FORWARD(bf16, bf16)
#undef HONE_INSTANTIATE_FORWARD

#define HONE_INSTANTIATE(T)                                                                                     \
  template void embedding_backward<T>(const int32_t*, const T*, float*, int64_t, int64_t, float*, int64_t,      \
                                      int64_t, int64_t, int64_t, const int32_t*);
HONE_INSTANTIATE(float)
HONE_INSTANTIATE(bf16)
#undef HONE_INSTANTIATE

}  // namespace hone::kernels::cuda
