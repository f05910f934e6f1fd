#pragma once
// Matrix multiplication on the CPU: oneDNN's matmul primitive for f32 and bf16
// (AMX / AVX-512 BF16 where present; see docs/benchmarks.md for the measurement
// that chose it), a plain blocked loop for the f64 gradient-check path.
#include <cstdint>

#include "hone/core/dtype.hpp"

namespace hone::kernels::cpu {

// C = alpha·op(A)·op(B) + beta·C for `batch` consecutive row-major matrices.
// op(A) is M×K (A is stored K×M when trans_a); op(B) is K×N (stored N×K when
// trans_b); C is M×N. Types: f32·f32→f32, bf16·bf16→f32|bf16, f64·f64→f64.
struct GemmArgs {
  int64_t batch = 1;
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  float alpha = 1.0f, beta = 0.0f;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  DType ab_type = DType::f32;
  DType c_type = DType::f32;
};

// Safe to call from several threads at once; inside an OpenMP parallel region
// the product runs on the calling thread.
void gemm(const GemmArgs& args);

}  // namespace hone::kernels::cpu
