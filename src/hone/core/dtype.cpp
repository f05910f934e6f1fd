#include "hone/core/dtype.hpp"

#include "hone/core/error.hpp"

namespace hone {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f64:
    case DType::i64: return 8;
    case DType::f32:
    case DType::i32: return 4;
    case DType::bf16:
    case DType::f16:
    case DType::u16: return 2;
    case DType::u8:
    case DType::fp8_e4m3:
    case DType::fp8_e5m2: return 1;
  }
  HONE_ASSERT(false);
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::f16: return "fp16";
    case DType::f64: return "fp64";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::u16: return "uint16";
    case DType::u8: return "uint8";
    case DType::fp8_e4m3: return "fp8_e4m3";
    case DType::fp8_e5m2: return "fp8_e5m2";
  }
  HONE_ASSERT(false);
}

DType parse_dtype(std::string_view name) {
  if (name == "fp32" || name == "f32" || name == "float32") return DType::f32;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "fp16" || name == "f16" || name == "float16") return DType::f16;
  if (name == "fp64" || name == "f64" || name == "float64") return DType::f64;
  fail("unknown dtype '{}': expected fp32, bf16, fp16 or fp64", name);
}

bool is_floating(DType dtype) {
  switch (dtype) {
    case DType::i32:
    case DType::i64:
    case DType::u16:
    case DType::u8: return false;
    default: return true;
  }
}

}  // namespace hone
