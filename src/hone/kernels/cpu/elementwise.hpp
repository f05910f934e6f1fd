#pragma once
// Element-wise kernels: residual add, bias, scaling, dtype casts, squared norms.
#include <cstdint>
#include <cstring>

#include "hone/core/dtype.hpp"

namespace hone::kernels::cpu {

// out = a + b (out may alias a or b). The backward of a residual add passes the
// output gradient unchanged to both inputs, which callers do by accumulating.
template <typename T>
void add(const T* a, const T* b, T* out, int64_t n);
// x += y
template <typename T>
void add_inplace(T* x, const T* y, int64_t n);
template <typename T>
void scale_inplace(T* x, int64_t n, double factor);
// Element-wise conversion between storage types (f32 <-> bf16, f64 <-> f32).
template <typename From, typename To>
void cast(const From* src, To* dst, int64_t n);

// IEEE 754 half precision (f16, stored as its bits) <-> float, bit exact: round
// to nearest even, subnormals, ±inf, and NaN (kept quiet, with as much of its
// payload as fits).
inline float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf, NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);  // rebias 15 -> 127
  } else {
    // Zero or subnormal: mantissa · 2^-24, exact in float.
    const float magnitude = float(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t float_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const auto sign = uint16_t((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((x >> 13) & 0x3ffu));  // NaN, quiet
  if (x >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 (halfway past 65504) and inf
  if (x >= 0x38800000u) {                                 // normal: >= 2^-14
    x -= 112u << 23;                                      // rebias 127 -> 15
    x += 0xfffu + ((x >> 13) & 1u);                       // round half to even (a carry bumps the exponent)
    return uint16_t(sign | (x >> 13));
  }
  // Subnormal or zero: the value in units of 2^-24, rounded half to even.
  const uint32_t exponent = x >> 23;
  if (exponent < 102) return sign;  // below 2^-25: rounds to zero
  const uint32_t mantissa = (x & 0x7fffffu) | 0x800000u, shift = 126 - exponent;
  uint32_t units = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (units & 1u))) ++units;  // 1024 units is the smallest normal
  return uint16_t(sign | units);
}

void cast_f16_to_f32(const uint16_t* src, float* dst, int64_t n);
void cast_f32_to_f16(const float* src, uint16_t* dst, int64_t n);
// y[row, :] += bias (a linear layer's bias; bias holds master weights).
template <typename T>
void add_bias(T* y, const compute_t<T>* bias, int64_t rows, int64_t cols);
// d_bias += Σ_rows dy[row, :], deterministic for any thread count.
template <typename T>
void bias_backward(const T* dy, compute_t<T>* d_bias, int64_t rows, int64_t cols);
// out = x · keep / (1 - p) with keep drawn per element from Philox(seed, stream,
// first + i): x is elements [first, first + n) of a whole with one mask.
template <typename T>
void dropout(const T* x, T* out, int64_t n, double p, uint64_t seed, uint64_t stream, int64_t first = 0);
// dst[r, col + j] += scale · src[r, j] for a [rows, cols] src and a [rows, width] dst.
template <typename T>
void add_scaled_columns(T* dst, int64_t width, int64_t col, const T* src, int64_t rows, int64_t cols, double scale);
// dst[r, j] = scale · src[r, col + j] for a [rows, width] src and a [rows, cols] dst.
template <typename T>
void copy_scaled_columns(const T* src, int64_t width, int64_t col, T* dst, int64_t rows, int64_t cols, double scale);
// Σ x² in double, deterministic for any thread count.
template <typename T>
double sum_squares(const T* x, int64_t n);

}  // namespace hone::kernels::cpu
