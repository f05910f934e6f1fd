#include "hone/kernels/cuda/activation.hpp"

#include "hone/kernels/cuda/common.cuh"

namespace hone::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.7978845608028654f;  // sqrt(2/π)
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;  // 1/sqrt(2π)

__device__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ float gelu(float x, bool tanh_approx) {
  if (tanh_approx) return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
  return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
}

__device__ float gelu_derivative(float x, bool tanh_approx) {
  if (tanh_approx) {
    const float t = tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
  }
  const float cdf = 0.5f * (1.0f + erff(x * kInvSqrt2));
  return cdf + x * expf(-0.5f * x * x) * kInvSqrt2Pi;
}

// Each thread takes kWidth consecutive columns of one row (common.cuh's groups).
template <typename T, int kWidth>
__global__ void swiglu_forward_kernel(const T* gate_up, T* out, int64_t rows, int64_t hidden) {
  HONE_ROW_STRIDE(row, rows) HONE_COLUMN_STRIDE(group, hidden / kWidth) {
    const int64_t j = group * kWidth;
    const auto g = load_elements<kWidth>(gate_up + row * 2 * hidden + j);
    const auto u = load_elements<kWidth>(gate_up + row * 2 * hidden + hidden + j);
    Elements<T, kWidth> y;
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      const float gk = to_f32(g.v[k]);
      y.v[k] = from_f32<T>(gk * sigmoid(gk) * to_f32(u.v[k]));
    }
    store_elements(out + row * hidden + j, y);
  }
}

template <typename T, int kWidth>
__global__ void swiglu_backward_kernel(const T* d_out, const T* gate_up, T* d_gate_up, int64_t rows, int64_t hidden) {
  HONE_ROW_STRIDE(row, rows) HONE_COLUMN_STRIDE(group, hidden / kWidth) {
    const int64_t j = group * kWidth;
    const int64_t gate = row * 2 * hidden + j, up = gate + hidden;
    const auto g = load_elements<kWidth>(gate_up + gate), u = load_elements<kWidth>(gate_up + up);
    const auto dy = load_elements<kWidth>(d_out + row * hidden + j);
    Elements<T, kWidth> d_gate, d_up;
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      const float gk = to_f32(g.v[k]), uk = to_f32(u.v[k]), dyk = to_f32(dy.v[k]), sk = sigmoid(gk);
      d_gate.v[k] = from_f32<T>(dyk * uk * sk * (1.0f + gk * (1.0f - sk)));
      d_up.v[k] = from_f32<T>(dyk * gk * sk);
    }
    store_elements(d_gate_up + gate, d_gate);  // after every read: d_gate_up may be gate_up
    store_elements(d_gate_up + up, d_up);
  }
}

template <typename T, int kWidth>
__global__ void gelu_forward_kernel(const T* x, T* y, int64_t n, bool tanh_approx) {
  HONE_GRID_STRIDE(i, n / kWidth) {
    const auto in = load_elements<kWidth>(x + i * kWidth);
    Elements<T, kWidth> out;
#pragma unroll
    for (int k = 0; k < kWidth; ++k) out.v[k] = from_f32<T>(gelu(to_f32(in.v[k]), tanh_approx));
    store_elements(y + i * kWidth, out);
  }
}

template <typename T, int kWidth>
__global__ void gelu_backward_kernel(const T* dy, const T* x, T* dx, int64_t n, bool tanh_approx) {
  HONE_GRID_STRIDE(i, n / kWidth) {
    const auto d = load_elements<kWidth>(dy + i * kWidth), in = load_elements<kWidth>(x + i * kWidth);
    Elements<T, kWidth> out;
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      out.v[k] = from_f32<T>(to_f32(d.v[k]) * gelu_derivative(to_f32(in.v[k]), tanh_approx));
    }
    store_elements(dx + i * kWidth, out);
  }
}

}  // namespace

template <typename T>
void swiglu_forward(const T* gate_up, T* out, int64_t rows, int64_t hidden) {
  if (rows * hidden == 0) return;
  launch_grouped_rows<T>(rows, hidden, wide_groups_fit<T>(hidden, {gate_up, out}), kThreads,
                         [&]<int kWidth>(RowsLaunch launch) {
                           HONE_LAUNCH(launch.blocks, launch.threads, 0, swiglu_forward_kernel<T, kWidth>)(
                               gate_up, out, rows, hidden);
                         });
  HONE_CUDA_LAUNCHED("swiglu_forward");
}

template <typename T>
void swiglu_backward(const T* d_out, const T* gate_up, T* d_gate_up, int64_t rows, int64_t hidden) {
  if (rows * hidden == 0) return;
  launch_grouped_rows<T>(rows, hidden, wide_groups_fit<T>(hidden, {d_out, gate_up, d_gate_up}), kThreads,
                         [&]<int kWidth>(RowsLaunch launch) {
                           HONE_LAUNCH(launch.blocks, launch.threads, 0, swiglu_backward_kernel<T, kWidth>)(
                               d_out, gate_up, d_gate_up, rows, hidden);
                         });
  HONE_CUDA_LAUNCHED("swiglu_backward");
}

template <typename T>
void gelu_forward(const T* x, T* y, int64_t n, GeluApproximation approximation) {
  if (n == 0) return;
  const bool tanh_approx = approximation == GeluApproximation::tanh;
  launch_grouped<T>(n, wide_groups_fit<T>(n, {x, y}), kThreads, [&]<int kWidth>(unsigned blocks) {
    HONE_LAUNCH(blocks, kThreads, 0, gelu_forward_kernel<T, kWidth>)(x, y, n, tanh_approx);
  });
  HONE_CUDA_LAUNCHED("gelu_forward");
}

template <typename T>
void gelu_backward(const T* dy, const T* x, T* dx, int64_t n, GeluApproximation approximation) {
  if (n == 0) return;
  const bool tanh_approx = approximation == GeluApproximation::tanh;
  launch_grouped<T>(n, wide_groups_fit<T>(n, {dy, x, dx}), kThreads, [&]<int kWidth>(unsigned blocks) {
    HONE_LAUNCH(blocks, kThreads, 0, gelu_backward_kernel<T, kWidth>)(dy, x, dx, n, tanh_approx);
  });
  HONE_CUDA_LAUNCHED("gelu_backward");
}

#define HONE_INSTANTIATE(T)                                                          \
  template void swiglu_forward<T>(const T*, T*, int64_t, int64_t);                   \
  template void swiglu_backward<T>(const T*, const T*, T*, int64_t, int64_t);        \
  template void gelu_forward<T>(const T*, T*, int64_t, GeluApproximation);           \
  template void gelu_backward<T>(const T*, const T*, T*, int64_t, GeluApproximation);
HONE_INSTANTIATE(float)
HONE_INSTANTIATE(bf16)
#undef HONE_INSTANTIATE

}  // namespace hone::kernels::cuda
