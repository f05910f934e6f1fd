#include "hone/kernels/cpu/activation.hpp"

#include "hone/kernels/cpu/fast_math.hpp"

#include <cmath>
#include <numbers>

namespace hone::kernels::cpu {

namespace {

template <typename C>
C sigmoid(C x) {
  return C(1) / (C(1) + fast_exp(-x));
}

// GELU and its derivative at x. The approximation is a template parameter so
// that each loop holds one formula: with a run-time choice inside the loop, the
// vectorized body evaluated both and selected one.
template <GeluApproximation kApproximation, typename C>
C gelu(C x) {
  if constexpr (kApproximation == GeluApproximation::tanh) {
    const C k = C(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);  // sqrt(2/π)
    return C(0.5) * x * (C(1) + fast_tanh(k * (x + C(0.044715) * x * x * x)));
  } else {
    return C(0.5) * x * (C(1) + fast_erf(x * C(std::numbers::sqrt2 / 2)));
  }
}

template <GeluApproximation kApproximation, typename C>
C gelu_derivative(C x) {
  if constexpr (kApproximation == GeluApproximation::tanh) {
    const C k = C(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);
    const C t = fast_tanh(k * (x + C(0.044715) * x * x * x));
    return C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * k * (C(1) + C(3 * 0.044715) * x * x);
  } else {
    const C cdf = C(0.5) * (C(1) + fast_erf(x * C(std::numbers::sqrt2 / 2)));
    const C pdf = fast_exp(C(-0.5) * x * x) * C(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
    return cdf + x * pdf;
  }
}

// f.template operator()<approximation>(), the run-time choice made once.
template <typename F>
void with_approximation(GeluApproximation approximation, F&& f) {
  if (approximation == GeluApproximation::tanh) f.template operator()<GeluApproximation::tanh>();
  else f.template operator()<GeluApproximation::none>();
}

}  // namespace

template <typename T>
void swiglu_forward(const T* gate_up, T* out, int64_t rows, int64_t hidden) {
  using C = compute_t<T>;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    const T* gate = gate_up + row * 2 * hidden;
    const T* up = gate + hidden;
    T* o = out + row * hidden;
#pragma omp simd
    for (int64_t j = 0; j < hidden; ++j) {
      const C g = load(gate[j]);
      o[j] = store<T>(g * sigmoid(g) * load(up[j]));
    }
  }
}

template <typename T>
void swiglu_backward(const T* d_out, const T* gate_up, T* d_gate_up, int64_t rows, int64_t hidden) {
  using C = compute_t<T>;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    const T* gate = gate_up + row * 2 * hidden;
    const T* up = gate + hidden;
    const T* dout = d_out + row * hidden;
    T* d_gate = d_gate_up + row * 2 * hidden;
    T* d_up = d_gate + hidden;
#pragma omp simd
    for (int64_t j = 0; j < hidden; ++j) {
      const C g = load(gate[j]), u = load(up[j]), dy = load(dout[j]);
      const C s = sigmoid(g);
      d_gate[j] = store<T>(dy * u * s * (C(1) + g * (C(1) - s)));
      d_up[j] = store<T>(dy * g * s);
    }
  }
}

template <typename T>
void gelu_forward(const T* x, T* y, int64_t n, GeluApproximation approximation) {
  with_approximation(approximation, [&]<GeluApproximation kApproximation>() {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = store<T>(gelu<kApproximation>(load(x[i])));
  });
}

template <typename T>
void gelu_backward(const T* dy, const T* x, T* dx, int64_t n, GeluApproximation approximation) {
  with_approximation(approximation, [&]<GeluApproximation kApproximation>() {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) dx[i] = store<T>(load(dy[i]) * gelu_derivative<kApproximation>(load(x[i])));
  });
}

#define HONE_INSTANTIATE(T)                                                          \
  template void swiglu_forward<T>(const T*, T*, int64_t, int64_t);                   \
  template void swiglu_backward<T>(const T*, const T*, T*, int64_t, int64_t);        \
  template void gelu_forward<T>(const T*, T*, int64_t, GeluApproximation);           \
  template void gelu_backward<T>(const T*, const T*, T*, int64_t, GeluApproximation);
HONE_INSTANTIATE(float)
HONE_INSTANTIATE(double)
HONE_INSTANTIATE(bf16)
#undef HONE_INSTANTIATE

}  // namespace hone::kernels::cpu
