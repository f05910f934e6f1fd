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

template <typename T>
__global__ void swiglu_forward_kernel(const T* gate_up, T* out, int64_t rows, int64_t hidden) {
  HONE_GRID_STRIDE(i, rows * hidden) {
    const int64_t row = i / hidden, j = i % hidden;
    const float g = to_f32(gate_up[row * 2 * hidden + j]), u = to_f32(gate_up[row * 2 * hidden + hidden + j]);
    out[i] = from_f32<T>(g * sigmoid(g) * u);
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(const T* d_out, const T* gate_up, T* d_gate_up, int64_t rows, int64_t hidden) {
  HONE_GRID_STRIDE(i, rows * hidden) {
    const int64_t row = i / hidden, j = i % hidden;
    const int64_t gate = row * 2 * hidden + j, up = gate + hidden;
    const float g = to_f32(gate_up[gate]), u = to_f32(gate_up[up]), dy = to_f32(d_out[i]);
    const float s = sigmoid(g);
    d_gate_up[gate] = from_f32<T>(dy * u * s * (1.0f + g * (1.0f - s)));
    d_gate_up[up] = from_f32<T>(dy * g * s);
  }
}

template <typename T>
__global__ void gelu_forward_kernel(const T* x, T* y, int64_t n, bool tanh_approx) {
  HONE_GRID_STRIDE(i, n) y[i] = from_f32<T>(gelu(to_f32(x[i]), tanh_approx));
}

template <typename T>
__global__ void gelu_backward_kernel(const T* dy, const T* x, T* dx, int64_t n, bool tanh_approx) {
  HONE_GRID_STRIDE(i, n) dx[i] = from_f32<T>(to_f32(dy[i]) * gelu_derivative(to_f32(x[i]), tanh_approx));
}

}  // namespace

template <typename T>
void swiglu_forward(const T* gate_up, T* out, int64_t rows, int64_t hidden) {
  if (rows * hidden == 0) return;
  HONE_LAUNCH(blocks_for(rows * hidden, kThreads), kThreads, 0, swiglu_forward_kernel)(gate_up, out, rows, hidden);
  HONE_CUDA_LAUNCHED("swiglu_forward");
}

template <typename T>
void swiglu_backward(const T* d_out, const T* gate_up, T* d_gate_up, int64_t rows, int64_t hidden) {
  if (rows * hidden == 0) return;
  HONE_LAUNCH(blocks_for(rows * hidden, kThreads), kThreads, 0, swiglu_backward_kernel)(
      d_out, gate_up, d_gate_up, rows, hidden);
  HONE_CUDA_LAUNCHED("swiglu_backward");
}

template <typename T>
void gelu_forward(const T* x, T* y, int64_t n, GeluApproximation approximation) {
  if (n == 0) return;
  HONE_LAUNCH(blocks_for(n, kThreads), kThreads, 0, gelu_forward_kernel)(
      x, y, n, approximation == GeluApproximation::tanh);
  HONE_CUDA_LAUNCHED("gelu_forward");
}

template <typename T>
void gelu_backward(const T* dy, const T* x, T* dx, int64_t n, GeluApproximation approximation) {
  if (n == 0) return;
  HONE_LAUNCH(blocks_for(n, kThreads), kThreads, 0, gelu_backward_kernel)(
      dy, x, dx, n, approximation == GeluApproximation::tanh);
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
