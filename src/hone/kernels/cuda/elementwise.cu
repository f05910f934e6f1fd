#include "hone/kernels/cuda/elementwise.hpp"

#include "hone/core/philox.hpp"
#include "hone/kernels/cuda/common.cuh"
#include "hone/kernels/cuda/reduce.cuh"

namespace hone::kernels::cuda {

namespace {

constexpr int kThreads = 256;

// In groups of kWidth elements (common.cuh).
template <typename T, int kWidth>
__global__ void add_kernel(const T* a, const T* b, T* out, int64_t n) {
  HONE_GRID_STRIDE(i, n / kWidth) {
    const auto x = load_elements<kWidth>(a + i * kWidth), y = load_elements<kWidth>(b + i * kWidth);
    Elements<T, kWidth> sum;
#pragma unroll
    for (int k = 0; k < kWidth; ++k) sum.v[k] = from_f32<T>(to_f32(x.v[k]) + to_f32(y.v[k]));
    store_elements(out + i * kWidth, sum);
  }
}

template <typename T, int kWidth>
__global__ void scale_kernel(T* x, int64_t n, float factor) {
  HONE_GRID_STRIDE(i, n / kWidth) {
    auto values = load_elements<kWidth>(x + i * kWidth);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) values.v[k] = from_f32<T>(to_f32(values.v[k]) * factor);
    store_elements(x + i * kWidth, values);
  }
}

// IEEE half bits <-> float, the same bits as kernels/cpu/elementwise.hpp's
// f16_to_float and float_to_f16 (round to nearest even, subnormals, inf, NaN).
struct F16 {
  uint16_t bits;
};

__device__ float f16_to_f32(F16 h) {
  const uint32_t sign = uint32_t(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu, mantissa = h.bits & 0x3ffu;
  if (exponent == 0x1f) return __uint_as_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return __uint_as_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
  const float magnitude = float(mantissa) * 5.9604644775390625e-8f;
  return sign ? -magnitude : magnitude;
}

__device__ F16 f32_to_f16(float f) {
  uint32_t x = __float_as_uint(f);
  const auto sign = uint16_t((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return F16{uint16_t(sign | 0x7e00u | ((x >> 13) & 0x3ffu))};
  if (x >= 0x477ff000u) return F16{uint16_t(sign | 0x7c00u)};
  if (x >= 0x38800000u) {
    x -= 112u << 23;
    x += 0xfffu + ((x >> 13) & 1u);
    return F16{uint16_t(sign | (x >> 13))};
  }
  const uint32_t exponent = x >> 23;
  if (exponent < 102) return F16{sign};
  const uint32_t mantissa = (x & 0x7fffffu) | 0x800000u, shift = 126 - exponent;
  uint32_t units = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (units & 1u))) ++units;
  return F16{uint16_t(sign | units)};
}

__device__ float widen(bf16 x) { return to_f32(x); }
__device__ float widen(F16 x) { return f16_to_f32(x); }
__device__ double widen(double x) { return x; }

template <typename To>
__device__ To narrow(float x);
template <>
__device__ bf16 narrow<bf16>(float x) {
  return from_f32<bf16>(x);
}
template <>
__device__ F16 narrow<F16>(float x) {
  return f32_to_f16(x);
}
template <>
__device__ double narrow<double>(float x) {
  return x;
}

template <typename From, typename To>
__global__ void cast_kernel(const From* src, To* dst, int64_t n) {
  if constexpr (std::is_same_v<To, float>) {
    HONE_GRID_STRIDE(i, n) dst[i] = float(widen(src[i]));
  } else {
    HONE_GRID_STRIDE(i, n) dst[i] = narrow<To>(src[i]);
  }
}

template <typename From, typename To>
void launch_cast(const void* src, void* dst, int64_t n) {
  HONE_LAUNCH(blocks_for(n, kThreads), kThreads, 0, cast_kernel<From, To>)(
      static_cast<const From*>(src), static_cast<To*>(dst), n);
  HONE_CUDA_LAUNCHED("cast");
}

template <typename T>
__global__ void add_bias_kernel(T* y, const float* bias, int64_t rows, int64_t cols) {
  HONE_ROW_STRIDE(row, rows) HONE_COLUMN_STRIDE(j, cols) {
    T& e = y[row * cols + j];
    e = from_f32<T>(to_f32(e) + bias[j]);
  }
}

template <typename T>
struct BiasTerm {
  const T* dy;
  int64_t cols;
  __device__ float operator()(int64_t row, int64_t col) const { return to_f32(dy[row * cols + col]); }
};

// One thread per Philox block of 4 elements, as the CPU draws them.
template <typename T>
__global__ void dropout_kernel(const T* x, T* out, int64_t n, uint32_t threshold, float scale, uint64_t seed,
                               uint64_t stream_id, int64_t first) {
  const int64_t first_block = first / 4;
  HONE_GRID_STRIDE(b, (first + n + 3) / 4 - first_block) {
    const int64_t block = first_block + b;
    const PhiloxBlock r = philox4x32(seed, uint64_t(block), stream_id);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t i = block * 4 + k - first;
      if (i >= 0 && i < n) out[i] = from_f32<T>(r[k] >= threshold ? to_f32(x[i]) * scale : 0.0f);
    }
  }
}

template <typename T>
__global__ void add_columns_kernel(T* dst, int64_t width, int64_t col, const T* src, int64_t rows, int64_t cols,
                                   float scale) {
  HONE_ROW_STRIDE(row, rows) HONE_COLUMN_STRIDE(j, cols) {
    T& d = dst[row * width + col + j];
    d = from_f32<T>(to_f32(d) + scale * to_f32(src[row * cols + j]));
  }
}

template <typename T>
__global__ void copy_columns_kernel(const T* src, int64_t width, int64_t col, T* dst, int64_t rows, int64_t cols,
                                    float scale) {
  HONE_ROW_STRIDE(row, rows) HONE_COLUMN_STRIDE(j, cols) {
    dst[row * cols + j] = from_f32<T>(scale * to_f32(src[row * width + col + j]));
  }
}

constexpr int kSumBlocks = 1024;

// Stage 1: each block's share in double, in 16-byte groups where n and x
// allow; the grid and the groups depend on n and x's alignment only, so the
// order of additions, and the result, is fixed for a buffer.
template <typename T, int kWidth>
__global__ void sum_squares_kernel(const T* x, int64_t n, double* partial) {
  __shared__ double scratch[kThreads / kWarpSize];
  double sum = 0;
  HONE_GRID_STRIDE(i, n / kWidth) {
    const auto group = load_elements<kWidth>(x + i * kWidth);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      const double v = to_f32(group.v[k]);
      sum += v * v;
    }
  }
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

__global__ void sum_partials_kernel(const double* partial, int count, double* total) {
  __shared__ double scratch[kThreads / kWarpSize];
  double sum = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partial[i];
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) *total = sum;
}

}  // namespace

template <typename T>
void add(const T* a, const T* b, T* out, int64_t n) {
  if (n == 0) return;
  launch_grouped<T>(n, wide_groups_fit<T>(n, {a, b, out}), kThreads, [&]<int kWidth>(unsigned blocks) {
    HONE_LAUNCH(blocks, kThreads, 0, add_kernel<T, kWidth>)(a, b, out, n);
  });
  HONE_CUDA_LAUNCHED("add");
}

template <typename T>
void scale_inplace(T* x, int64_t n, double factor) {
  if (n == 0) return;
  launch_grouped<T>(n, wide_groups_fit<T>(n, {x}), kThreads, [&]<int kWidth>(unsigned blocks) {
    HONE_LAUNCH(blocks, kThreads, 0, scale_kernel<T, kWidth>)(x, n, float(factor));
  });
  HONE_CUDA_LAUNCHED("scale");
}

void cast(const void* src, DType from, void* dst, DType to, int64_t n) {
  if (n == 0) return;
  if (from == to) {
    HONE_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(n) * dtype_size(to), cudaMemcpyDeviceToDevice, stream()));
  } else if (from == DType::f32 && to == DType::bf16) {
    launch_cast<float, bf16>(src, dst, n);
  } else if (from == DType::bf16 && to == DType::f32) {
    launch_cast<bf16, float>(src, dst, n);
  } else if (from == DType::f32 && to == DType::f16) {
    launch_cast<float, F16>(src, dst, n);
  } else if (from == DType::f16 && to == DType::f32) {
    launch_cast<F16, float>(src, dst, n);
  } else if (from == DType::f32 && to == DType::f64) {
    launch_cast<float, double>(src, dst, n);
  } else if (from == DType::f64 && to == DType::f32) {
    launch_cast<double, float>(src, dst, n);
  } else {
    fail_text("cast: no conversion from " + std::string(dtype_name(from)) + " to " + std::string(dtype_name(to)));
  }
}

template <typename T>
void add_bias(T* y, const float* bias, int64_t rows, int64_t cols) {
  if (rows * cols == 0) return;
  const RowsLaunch launch = rows_launch(rows, cols, kThreads);
  HONE_LAUNCH(launch.blocks, launch.threads, 0, add_bias_kernel<T>)(y, bias, rows, cols);
  HONE_CUDA_LAUNCHED("add_bias");
}

template <typename T>
void bias_backward(const T* dy, float* d_bias, int64_t rows, int64_t cols) {
  accumulate_columns(BiasTerm<T>{dy, cols}, rows, cols, d_bias);
}

template <typename T>
void dropout(const T* x, T* out, int64_t n, double p, uint64_t seed, uint64_t stream_id, int64_t first) {
  if (n == 0) return;
  const auto threshold = uint32_t(p * 4294967296.0);
  const auto scale = float(1.0 / (1.0 - p));
  const int64_t blocks = (first + n + 3) / 4 - first / 4;
  HONE_LAUNCH(blocks_for(blocks, kThreads), kThreads, 0, dropout_kernel<T>)(
      x, out, n, threshold, scale, seed, stream_id, first);
  HONE_CUDA_LAUNCHED("dropout");
}

template <typename T>
void add_scaled_columns(T* dst, int64_t width, int64_t col, const T* src, int64_t rows, int64_t cols, double scale) {
  if (rows * cols == 0) return;
  const RowsLaunch launch = rows_launch(rows, cols, kThreads);
  HONE_LAUNCH(launch.blocks, launch.threads, 0, add_columns_kernel<T>)(
      dst, width, col, src, rows, cols, float(scale));
  HONE_CUDA_LAUNCHED("add_columns");
}

template <typename T>
void copy_scaled_columns(const T* src, int64_t width, int64_t col, T* dst, int64_t rows, int64_t cols,
                         double scale) {
  if (rows * cols == 0) return;
  const RowsLaunch launch = rows_launch(rows, cols, kThreads);
  HONE_LAUNCH(launch.blocks, launch.threads, 0, copy_columns_kernel<T>)(
      src, width, col, dst, rows, cols, float(scale));
  HONE_CUDA_LAUNCHED("copy_columns");
}

template <typename T>
double sum_squares(const T* x, int64_t n) {
  if (n == 0) return 0.0;
  DeviceBuffer partial((kSumBlocks + 1) * sizeof(double));
  double* total = partial.as<double>() + kSumBlocks;
  unsigned blocks = 0;
  launch_grouped<T>(n, wide_groups_fit<T>(n, {x}), kThreads, [&]<int kWidth>(unsigned enough) {
    blocks = std::min<unsigned>(kSumBlocks, enough);
    HONE_LAUNCH(blocks, kThreads, 0, sum_squares_kernel<T, kWidth>)(x, n, partial.as<double>());
  });
  HONE_CUDA_LAUNCHED("sum_squares");
  HONE_LAUNCH(1, kThreads, 0, sum_partials_kernel)(partial.as<double>(), int(blocks), total);
  HONE_CUDA_LAUNCHED("sum_squares (partials)");
  double result = 0;
  copy_to_host(&result, total, sizeof result);
  return result;
}

#define HONE_INSTANTIATE(T)                                                                                 \
  template void add<T>(const T*, const T*, T*, int64_t);                                                    \
  template void scale_inplace<T>(T*, int64_t, double);                                                      \
  template void add_bias<T>(T*, const float*, int64_t, int64_t);                                            \
  template void bias_backward<T>(const T*, float*, int64_t, int64_t);                                       \
  template void dropout<T>(const T*, T*, int64_t, double, uint64_t, uint64_t, int64_t);                     \
  template void add_scaled_columns<T>(T*, int64_t, int64_t, const T*, int64_t, int64_t, double);            \
  template void copy_scaled_columns<T>(const T*, int64_t, int64_t, T*, int64_t, int64_t, double);           \
  template double sum_squares<T>(const T*, int64_t);
HONE_INSTANTIATE(float)
HONE_INSTANTIATE(bf16)
#undef HONE_INSTANTIATE

}  // namespace hone::kernels::cuda
