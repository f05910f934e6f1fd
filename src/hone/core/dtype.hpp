#pragma once
// Element types and the bf16 conversions every backend shares.
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

namespace hone {

// f64 exists for gradient checks in tests; fp8 types are reserved for later.
enum class DType : uint8_t { f32, bf16, f16, f64, i32, i64, u16, u8, fp8_e4m3, fp8_e5m2 };

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);
// Parses "f32"/"fp32"/"float32", "bf16"/"bfloat16", ...; throws hone::Error otherwise.
DType parse_dtype(std::string_view name);
bool is_floating(DType dtype);

// bfloat16 storage: the upper half of an IEEE float.
struct bf16 {
  uint16_t bits;
};

inline float bf16_to_float(bf16 x) {
  uint32_t u = uint32_t(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest even, as hardware conversions (vcvtneps2bf16) do.
inline bf16 float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  // Round to nearest even; a NaN stays a (quiet) NaN. A select, not a branch, so
  // that loops converting arrays vectorize.
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return bf16{uint16_t((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded)};
}

// Kernels are templates over the storage type T and compute in compute_t<T>:
// float for f32 and bf16 storage, double for the f64 gradient-check path.
template <typename T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

inline float load(float x) { return x; }
inline double load(double x) { return x; }
inline float load(bf16 x) { return bf16_to_float(x); }

// Any element as a number, for conversions off the hot path.
template <typename T>
inline auto load_any(T x) {
  if constexpr (std::is_same_v<T, bf16>) return bf16_to_float(x);
  else return x;
}

template <typename T>
inline T store(compute_t<T> x) {
  if constexpr (std::is_same_v<T, bf16>) {
    return float_to_bf16(x);
  } else {
    return x;
  }
}

template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  else if constexpr (std::is_same_v<T, double>) return DType::f64;
  else if constexpr (std::is_same_v<T, bf16>) return DType::bf16;
  else if constexpr (std::is_same_v<T, int32_t>) return DType::i32;
  else if constexpr (std::is_same_v<T, int64_t>) return DType::i64;
  else if constexpr (std::is_same_v<T, uint16_t>) return DType::u16;
  else if constexpr (std::is_same_v<T, uint8_t>) return DType::u8;
  else static_assert(sizeof(T) == 0, "no DType for this C++ type");
}

}  // namespace hone
