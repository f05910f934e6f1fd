#pragma once
// Deterministic column sums for parameter gradients (biases, norm weights):
// rows are cut into chunks whose size depends on the row count only; one
// kernel sums each chunk's rows in order, one thread per column (coalesced
// reads along a row), and a second adds the chunk sums in chunk order. No
// atomics, so the result is the same on every run and every GPU.
#include "hone/kernels/cuda/common.cuh"

namespace hone::kernels::cuda {

constexpr int kColumnThreads = 256;
constexpr int64_t kColumnChunkRows = 64;

template <typename F>
__global__ void column_partials_kernel(F term, int64_t rows, int64_t width, int64_t chunk_rows, float* partial) {
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= width) return;
  const int64_t begin = int64_t(blockIdx.y) * chunk_rows;
  const int64_t end = begin + chunk_rows < rows ? begin + chunk_rows : rows;
  float acc = 0;
  for (int64_t r = begin; r < end; ++r) acc += term(r, col);
  partial[int64_t(blockIdx.y) * width + col] = acc;
}

// first[j] += column j's sum for j < split, second[j - split] += it for the rest.
template <typename Acc>
__global__ void column_finish_kernel(const Acc* partial, int64_t chunks, int64_t width, int64_t split, Acc* first,
                                     Acc* second) {
  HONE_GRID_STRIDE(col, width) {
    Acc sum = 0;
    for (int64_t c = 0; c < chunks; ++c) sum += partial[c * width + col];
    if (col < split) first[col] += sum;
    else second[col - split] += sum;
  }
}

// Adds Σ_rows term(row, col) to the columns [0, width) of first (and, from
// column `split` on, of second). term is a __device__ functor.
template <typename F>
void accumulate_columns(F term, int64_t rows, int64_t width, float* first, int64_t split, float* second) {
  if (rows == 0 || width == 0) return;
  // At most 256 chunks: (width / 256) x 256 blocks keep a GPU busy, and the
  // scratch stays 256 rows of partial sums (4 MiB at width 4096) however many
  // rows a long sequence brings.
  constexpr int64_t kMaxChunks = 256;
  const int64_t min_chunk = (rows + kMaxChunks - 1) / kMaxChunks;
  const int64_t chunk_rows = min_chunk > kColumnChunkRows ? min_chunk : kColumnChunkRows;
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  DeviceBuffer partial(size_t(chunks * width) * sizeof(float));
  const dim3 grid(unsigned((width + kColumnThreads - 1) / kColumnThreads), unsigned(chunks));
  HONE_LAUNCH(grid, kColumnThreads, 0, column_partials_kernel<F>)(term, rows, width, chunk_rows, partial.as<float>());
  HONE_CUDA_LAUNCHED("column_partials");
  HONE_LAUNCH(blocks_for(width, kColumnThreads), kColumnThreads, 0, column_finish_kernel<float>)(
      partial.as<float>(), chunks, width, split, first, second);
  HONE_CUDA_LAUNCHED("column_finish");
}

template <typename F>
void accumulate_columns(F term, int64_t rows, int64_t width, float* out) {
  accumulate_columns(term, rows, width, out, width, nullptr);
}

}  // namespace hone::kernels::cuda
