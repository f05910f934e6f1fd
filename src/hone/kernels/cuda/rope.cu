#include "hone/kernels/cuda/rope.hpp"

#include "hone/kernels/cuda/common.cuh"

namespace hone::kernels::cuda {

namespace {

constexpr int kThreads = 256;

// One thread per rotated pair: a sample's rows are the block's rows (grid x),
// heads the grid's y, samples its z; pair index k < head_dim/2 the block's columns.
template <typename T>
__global__ void rope_kernel(T* x, const float* cos, const float* sin, int64_t batch, int64_t seq, int64_t head_dim,
                            int64_t row_stride, int64_t position_offset, float sign, const int32_t* positions) {
  const int64_t half = head_dim / 2, head = blockIdx.y;
  HONE_SAMPLE_STRIDE(sample, batch) HONE_ROW_STRIDE(t, seq) {
    const int64_t row = sample * seq + t;
    const int64_t position = positions ? int64_t(positions[row]) : position_offset + t;
    T* v = x + row * row_stride + head * head_dim;
    HONE_COLUMN_STRIDE(k, half) {
      const float c = cos[position * half + k], s = sin[position * half + k];
      const float x1 = to_f32(v[k]), x2 = to_f32(v[k + half]);
      v[k] = from_f32<T>(x1 * c - sign * x2 * s);
      v[k + half] = from_f32<T>(x2 * c + sign * x1 * s);
    }
  }
}

}  // namespace

template <typename T>
void rope_apply(T* x, const float* cos, const float* sin, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                int64_t row_stride, int64_t position_offset, bool inverse, const int32_t* positions) {
  const int64_t half = head_dim / 2;
  if (batch * seq * heads * half == 0) return;
  const RowsLaunch launch = rows_launch(seq, half, kThreads);
  HONE_LAUNCH(dim3(launch.blocks, unsigned(heads), samples_grid(batch)), launch.threads, 0, rope_kernel<T>)(
      x, cos, sin, batch, seq, head_dim, row_stride, position_offset, inverse ? -1.0f : 1.0f, positions);
  HONE_CUDA_LAUNCHED("rope");
}

template void rope_apply<float>(float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                int64_t, bool, const int32_t*);
template void rope_apply<bf16>(bf16*, const float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                               bool, const int32_t*);

}  // namespace hone::kernels::cuda
