#pragma once
// exp() and max() that the compiler vectorizes. glibc's expf is a function call
// per element (its vector variants need -ffast-math), which made the softmax over a
// 50k vocabulary cost more than the matrix products around it. This is the
// classic range reduction exp(x) = 2^n · exp(r), |r| <= ln2/2, with Cephes'
// degree-6 polynomial: relative error below 2e-7 (about 1 ulp), NaN kept, and 0
// below -87 (where expf is a denormal or 0), so masked scores (-inf) give exactly
// 0. The fp64 gradient-check path keeps std::exp.
#include <bit>
#include <cmath>
#include <cstdint>

namespace hone::kernels::cpu {

inline float fast_exp(float x) {
  // Comparisons and an add-subtract rounding, not fmin/fmax/nearbyint: GCC only
  // vectorizes those under -ffast-math.
  const float clamped = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
  constexpr float kRound = 12582912.0f;  // 1.5·2^23: adding it rounds to an integer
  const float n = (clamped * 1.44269504088896341f + kRound) - kRound;  // round(x / ln2)
  // r = x - n·ln2 in two steps (Cody-Waite), so r keeps its low bits.
  float r = std::fma(n, -0.693359375f, clamped);
  r = std::fma(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  const float y = std::fma(p * r, r, r + 1.0f);
  const float scale = std::bit_cast<float>(uint32_t(int32_t(n) + 127) << 23);  // 2^n
  return x != x ? x : x < -87.0f ? 0.0f : y * scale;
}

inline double fast_exp(double x) { return std::exp(x); }

// std::max(a, b) as a select of values: GCC vectorizes it inside `omp simd
// reduction(max : ...)` loops, where std::max (which returns a reference) stays
// a scalar compare-and-branch chain, 10x slower on a row of softmax scores.
// Same result as std::max(a, b), NaN in b ignored included.
template <typename C>
inline C fast_max(C a, C b) {
  return b > a ? b : a;
}

// tanh through exp: 1 - 2 / (e^{2x} + 1); absolute error about 1e-7.
inline float fast_tanh(float x) { return 1.0f - 2.0f / (fast_exp(2.0f * x) + 1.0f); }
inline double fast_tanh(double x) { return std::tanh(x); }

// erf by Abramowitz & Stegun 7.1.26: the formula errs by at most 1.5e-7, float
// arithmetic adds rounding: below 5e-7 in all.
inline float fast_erf(float x) {
  const float a = x < 0 ? -x : x;
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  const float poly =
      t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  const float y = 1.0f - poly * fast_exp(-a * a);
  return x < 0 ? -y : y;
}
inline double fast_erf(double x) { return std::erf(x); }

}  // namespace hone::kernels::cpu
