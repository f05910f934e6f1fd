#pragma once
// Deterministic column sums for parameter gradients (biases, norm weights):
// rows are cut into chunks whose size depends on the row count only; one
// kernel sums each chunk's rows, a second adds the chunk sums, both in an
// order fixed by the shapes alone. No atomics, so the result is the same on
// every run and every GPU.
#include "hone/kernels/cuda/common.cuh"

namespace hone::kernels::cuda {

// A block sums a run of rows for 32 neighbouring columns (a warp reads 32
// columns of one row: coalesced) with 8 warps on every 8th row, each thread
// loading 8 rows before it adds them: GPT-2's bias gradients (rows of 768 to
// 3072) with a thread per column and its rows one at a time kept too few
// loads in flight to stream the gradient at the memory's speed.
constexpr int kColumnLanes = 32;
constexpr int kRowLanes = 8;
constexpr int kRowsInFlight = 8;
constexpr int64_t kColumnChunkRows = 64;

// Σ term(row, col) over rows [chunk · chunk_rows, + chunk_rows) ∩ [0, rows),
// chunk = blockIdx.y, handed to sink(chunk, col, sum). Each thread adds its
// rows in order, then warp 0 adds the 8 warps' sums in warp order.
template <typename F, typename Sink>
__global__ void column_sums_kernel(F term, int64_t rows, int64_t width, int64_t chunk_rows, Sink sink) {
  __shared__ float sums[kRowLanes][kColumnLanes];
  const int64_t col = int64_t(blockIdx.x) * kColumnLanes + threadIdx.x;
  const int64_t begin = int64_t(blockIdx.y) * chunk_rows;
  const int64_t end = begin + chunk_rows < rows ? begin + chunk_rows : rows;
  float acc = 0;
  if (col < width) {
    for (int64_t first = begin + threadIdx.y; first < end; first += kRowsInFlight * kRowLanes) {
      float terms[kRowsInFlight];
#pragma unroll
      for (int i = 0; i < kRowsInFlight; ++i) {
        const int64_t row = first + i * kRowLanes;
        terms[i] = row < end ? term(row, col) : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < kRowsInFlight; ++i) acc += terms[i];
    }
  }
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || col >= width) return;
  float total = 0;
#pragma unroll
  for (int lane = 0; lane < kRowLanes; ++lane) total += sums[lane][threadIdx.x];
  sink(int64_t(blockIdx.y), col, total);
}

// A chunk's sums, row by row: [chunks, width].
struct PartialSink {
  float* partial;
  int64_t width;
  __device__ void operator()(int64_t chunk, int64_t col, float sum) const { partial[chunk * width + col] = sum; }
};

struct PartialTerm {
  const float* partial;
  int64_t width;
  __device__ float operator()(int64_t chunk, int64_t col) const { return partial[chunk * width + col]; }
};

// first[j] += column j's sum for j < split, second[j - split] += it for the rest.
struct SplitSink {
  float* first;
  float* second;
  int64_t split;
  __device__ void operator()(int64_t, int64_t col, float sum) const {
    if (col < split) first[col] += sum;
    else second[col - split] += sum;
  }
};

template <typename F, typename Sink>
void launch_column_sums(F term, int64_t rows, int64_t width, int64_t chunk_rows, int64_t chunks, Sink sink) {
  const dim3 grid(unsigned((width + kColumnLanes - 1) / kColumnLanes), unsigned(chunks));
  HONE_LAUNCH(grid, dim3(kColumnLanes, kRowLanes), 0, column_sums_kernel<F, Sink>)(term, rows, width, chunk_rows, sink);
  HONE_CUDA_LAUNCHED("column_sums");
}

// Adds Σ_rows term(row, col) to the columns [0, width) of first (and, from
// column `split` on, of second). term is a __device__ functor.
template <typename F>
void accumulate_columns(F term, int64_t rows, int64_t width, float* first, int64_t split, float* second) {
  if (rows == 0 || width == 0) return;
  // At most 256 chunks: (width / 32) x 256 blocks keep a GPU busy, and the
  // scratch stays 256 rows of partial sums (4 MiB at width 4096) however many
  // rows a long sequence brings. The second pass is one chunk of them all.
  constexpr int64_t kMaxChunks = 256;
  const int64_t min_chunk = (rows + kMaxChunks - 1) / kMaxChunks;
  const int64_t chunk_rows = min_chunk > kColumnChunkRows ? min_chunk : kColumnChunkRows;
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  DeviceBuffer partial(size_t(chunks * width) * sizeof(float));
  launch_column_sums(term, rows, width, chunk_rows, chunks, PartialSink{partial.as<float>(), width});
  launch_column_sums(PartialTerm{partial.as<float>(), width}, chunks, width, chunks, 1,
                     SplitSink{first, second, split});
}

template <typename F>
void accumulate_columns(F term, int64_t rows, int64_t width, float* out) {
  accumulate_columns(term, rows, width, out, width, nullptr);
}

}  // namespace hone::kernels::cuda
