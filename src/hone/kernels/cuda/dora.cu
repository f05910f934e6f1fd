#include "hone/kernels/cuda/dora.hpp"

#include "hone/kernels/cuda/common.cuh"
#include "hone/kernels/cuda/reduce.cuh"

namespace hone::kernels::cuda {

namespace {

constexpr int kThreads = 256;

// One block per row: w + s·(B·A) element by element (A's rows read
// coalesced), the squares summed in double, in a fixed order.
template <typename T>
__global__ void dora_norms_kernel(const T* weight, int64_t rows, int64_t in, const float* a, const float* b,
                                  int64_t rank, float s, const float* magnitude, float* scale, float* inv_norm,
                                  float* norms) {
  __shared__ double scratch[kThreads / kWarpSize];
  for (int64_t i = blockIdx.x; i < rows; i += gridDim.x) {
    const T* w = weight + i * in;
    const float* bi = b + i * rank;
    double sum = 0;
    for (int64_t j = threadIdx.x; j < in; j += blockDim.x) {
      float v = to_f32(w[j]);
      for (int64_t r = 0; r < rank; ++r) v += s * bi[r] * a[r * in + j];
      sum += double(v) * double(v);
    }
    sum = block_sum(sum, scratch);
    if (threadIdx.x == 0) {
      const float norm = float(sqrt(sum));
      inv_norm[i] = float(1.0 / double(norm));
      scale[i] = float(double(magnitude[i]) / double(norm));
      if (norms) norms[i] = norm;
    }
  }
}

__global__ void scale_rows_kernel(float* x, int64_t rows, int64_t cols, const float* factor) {
  HONE_ROW_STRIDE(row, rows) HONE_COLUMN_STRIDE(j, cols) x[row * cols + j] *= factor[row];
}

template <typename T>
__global__ void dora_scale_forward_kernel(T* y, int64_t width, int64_t col, int64_t rows, int64_t cols,
                                          const float* scale, const float* bias, T* z) {
  HONE_ROW_STRIDE(row, rows) HONE_COLUMN_STRIDE(j, cols) {
    T& out = y[row * width + col + j];
    const float b = bias ? bias[j] : 0.0f;
    const float value = to_f32(out) - b;
    z[row * cols + j] = from_f32<T>(value);
    out = from_f32<T>(scale[j] * value + b);
  }
}

template <typename T>
__global__ void scale_columns_kernel(T* dy, int64_t width, int64_t col, int64_t rows, int64_t cols,
                                     const float* scale) {
  HONE_ROW_STRIDE(row, rows) HONE_COLUMN_STRIDE(j, cols) {
    T& g = dy[row * width + col + j];
    g = from_f32<T>(to_f32(g) * scale[j]);
  }
}

// dy·z·inv_norm at (row, column j of the block), for accumulate_columns.
template <typename T>
struct MagnitudeTerm {
  const T* dy;
  const T* z;
  const float* inv_norm;
  int64_t width, col, cols;
  __device__ float operator()(int64_t row, int64_t j) const {
    return to_f32(dy[row * width + col + j]) * to_f32(z[row * cols + j]) * inv_norm[j];
  }
};

}  // namespace

template <typename T>
void dora_norms(const T* weight, int64_t rows, int64_t in, const float* a, const float* b, int64_t rank, double s,
                const float* magnitude, float* scale, float* inv_norm, float* norms) {
  if (rows == 0) return;
  HONE_LAUNCH(blocks_for(rows, 1), kThreads, 0, dora_norms_kernel<T>)(weight, rows, in, a, b, rank, float(s),
                                                                     magnitude, scale, inv_norm, norms);
  HONE_CUDA_LAUNCHED("dora_norms");
}

void scale_rows(float* x, int64_t rows, int64_t cols, const float* factor) {
  if (rows * cols == 0) return;
  const RowsLaunch launch = rows_launch(rows, cols, kThreads);
  HONE_LAUNCH(launch.blocks, launch.threads, 0, scale_rows_kernel)(x, rows, cols, factor);
  HONE_CUDA_LAUNCHED("scale_rows");
}

template <typename T>
void dora_scale_forward(T* y, int64_t width, int64_t col, int64_t rows, int64_t cols, const float* scale,
                        const float* bias, T* z) {
  if (rows * cols == 0) return;
  const RowsLaunch launch = rows_launch(rows, cols, kThreads);
  HONE_LAUNCH(launch.blocks, launch.threads, 0, dora_scale_forward_kernel<T>)(y, width, col, rows, cols, scale,
                                                                             bias, z);
  HONE_CUDA_LAUNCHED("dora_scale_forward");
}

template <typename T>
void dora_scale_backward(T* dy, int64_t width, int64_t col, int64_t rows, int64_t cols, const T* z,
                         const float* scale, const float* inv_norm, float* d_magnitude) {
  if (rows * cols == 0) return;
  // The magnitudes' gradient reads dy before it is scaled (stream order).
  accumulate_columns(MagnitudeTerm<T>{dy, z, inv_norm, width, col, cols}, rows, cols, d_magnitude);
  const RowsLaunch launch = rows_launch(rows, cols, kThreads);
  HONE_LAUNCH(launch.blocks, launch.threads, 0, scale_columns_kernel<T>)(dy, width, col, rows, cols, scale);
  HONE_CUDA_LAUNCHED("dora_scale_backward");
}

#define HONE_INSTANTIATE(T)                                                                               \
  template void dora_norms<T>(const T*, int64_t, int64_t, const float*, const float*, int64_t, double,        \
                              const float*, float*, float*, float*);                                        \
  template void dora_scale_forward<T>(T*, int64_t, int64_t, int64_t, int64_t, const float*, const float*, T*); \
  template void dora_scale_backward<T>(T*, int64_t, int64_t, int64_t, int64_t, const T*, const float*,      \
                                       const float*, float*);
HONE_INSTANTIATE(float)
HONE_INSTANTIATE(bf16)
#undef HONE_INSTANTIATE

}  // namespace hone::kernels::cuda
