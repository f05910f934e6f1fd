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
  // Row strides of A, B and C as stored, in elements; 0: packed (the stored
  // row's length). Wider rows are padded (the output head's logits on the GPU,
  // whose rows start 16-byte aligned so that cuBLASLt runs its vector kernels);
  // padding is neither read nor written. Batch 1 only.
  int64_t lda = 0, ldb = 0, ldc = 0;

  // The stored rows' lengths, and their strides.
  int64_t row_length_a() const { return trans_a ? m : k; }
  int64_t row_length_b() const { return trans_b ? k : n; }
  int64_t row_stride_a() const { return lda != 0 ? lda : row_length_a(); }
  int64_t row_stride_b() const { return ldb != 0 ? ldb : row_length_b(); }
  int64_t row_stride_c() const { return ldc != 0 ? ldc : n; }
  bool packed() const {
    return row_stride_a() == row_length_a() && row_stride_b() == row_length_b() && row_stride_c() == n;
  }
};

// Safe to call from several threads at once; inside an OpenMP parallel region
// the product runs on the calling thread. Padded rows are copied to and from
// packed scratch: correct, not fast (the CPU's own plans keep rows packed).
void gemm(const GemmArgs& args);

// How bf16·bf16 products run. `native`: on the CPU's bf16 instructions (AMX, or
// AVX-512 BF16's dot products). `widened`: as f32 products of the operands
// widened to f32 a block at a time, summed in f32 either way; the products of
// bf16 values are exact in f32, so the two differ only in the order of the sums.
// Where AVX-512 BF16 computes no faster than f32's FMAs (Intel's cores without
// AMX: about half the f32 rate once converted), or is missing (oneDNN emulates
// it, slower still), widening is the faster; with AMX it is not. Products of
// fewer than 64 rows or columns (decoding, LoRA's adapters) stay native: there
// widening costs more than it saves. On a CPU for which oneDNN has no bf16
// products (without AVX-512: Zen 2 and 3, Intel's before Skylake-SP and its
// client cores) every product is widened, whatever its size.
enum class Bf16Products { native, widened };
// Chosen once per process, by a fixed rule so that a machine always computes
// the same sums: HONE_CPU_BF16_PRODUCTS=native|widened, else native with AMX,
// widened without bf16 instructions, and with AVX-512 BF16 alone widened on
// Intel's CPUs and native on others (AMD's Zen 4 and 5 run it at twice f32's rate).
Bf16Products bf16_products();
const char* bf16_products_name(Bf16Products mode);
// Overrides the choice (tests run both ways in one process).
void set_bf16_products(Bf16Products mode);
// Whether oneDNN multiplies bf16 operands on this CPU (found once, by planning
// a product); the setter lets tests take the path of a CPU without them.
bool native_bf16_products_available();
void set_native_bf16_products_available(bool available);

}  // namespace hone::kernels::cpu
