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

// Thread (column j, bucket b) owns column j of every table row r with r % buckets == b:
// it walks all input rows in order and adds those that land in its table rows.
// index null: table row = input row % seq (learned positions without packing);
// else index - first (the table holds rows [first, first + table_rows)).
constexpr int kColumnsPerBlock = kWarpSize;
constexpr int kBucketsPerBlock = kThreads / kColumnsPerBlock;
constexpr int kBuckets = 64;

template <typename T>
__global__ void scatter_add_rows_kernel(const int32_t* index, int64_t first, int64_t seq, const T* g, float* table,
                                        int64_t table_rows, int64_t rows, int64_t dim) {
  const int64_t j = int64_t(blockIdx.x) * kColumnsPerBlock + threadIdx.x;
  const int bucket = int(blockIdx.y) * kBucketsPerBlock + int(threadIdx.y);
  if (j >= dim) return;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t target = index ? int64_t(index[r]) - first : r % seq;
    if (target < 0 || target >= table_rows || target % kBuckets != bucket) continue;
    table[target * dim + j] += to_f32(g[r * dim + j]);
  }
}

template <typename T>
void scatter_add_rows(const int32_t* index, int64_t first, int64_t seq, const T* g, float* table, int64_t table_rows,
                      int64_t rows, int64_t dim) {
  const dim3 block(kColumnsPerBlock, kBucketsPerBlock);
  const dim3 grid(unsigned((dim + kColumnsPerBlock - 1) / kColumnsPerBlock), kBuckets / kBucketsPerBlock);
  HONE_LAUNCH(grid, block, 0, scatter_add_rows_kernel<T>)(index, first, seq, g, table, table_rows, rows, dim);
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
