#pragma once
// C[m×n] += A[m×k] · B[k×n] for the small row-major tiles of tiled attention
// (m, n, k up to a tile of 64 or a head dimension). Blocks of 4 rows × 32
// columns keep their accumulators in registers (8 AVX-512 or 16 AVX2 registers)
// while k streams through: several times faster than the dot-product and
// axpy loops it replaces. Edges, and the fp64 check path, take a plain loop.
#include <cstdint>

namespace hone::kernels::cpu {

namespace tile_gemm_detail {

template <typename C, int kRows, int kCols>
inline void block(const C* a, int64_t lda, const C* b, int64_t ldb, C* c, int64_t ldc, int64_t k) {
  C acc[kRows][kCols];
  for (int r = 0; r < kRows; ++r)
#pragma omp simd
    for (int j = 0; j < kCols; ++j) acc[r][j] = c[r * ldc + j];
  for (int64_t p = 0; p < k; ++p) {
    const C* row = b + p * ldb;
    for (int r = 0; r < kRows; ++r) {
      const C x = a[r * lda + p];
#pragma omp simd
      for (int j = 0; j < kCols; ++j) acc[r][j] += x * row[j];
    }
  }
  for (int r = 0; r < kRows; ++r)
#pragma omp simd
    for (int j = 0; j < kCols; ++j) c[r * ldc + j] = acc[r][j];
}

template <typename C>
inline void plain(const C* a, int64_t lda, const C* b, int64_t ldb, C* c, int64_t ldc, int64_t m, int64_t n,
                  int64_t k) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      const C x = a[i * lda + p];
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] += x * b[p * ldb + j];
    }
}

}  // namespace tile_gemm_detail

template <typename C>
inline void tile_gemm(const C* a, int64_t lda, const C* b, int64_t ldb, C* c, int64_t ldc, int64_t m, int64_t n,
                      int64_t k) {
  using namespace tile_gemm_detail;
  if constexpr (sizeof(C) != sizeof(float)) {
    plain(a, lda, b, ldb, c, ldc, m, n, k);
  } else {
    constexpr int kRows = 4, kCols = 32;
    const int64_t full_rows = m / kRows * kRows, full_cols = n / kCols * kCols;
    for (int64_t i = 0; i < full_rows; i += kRows)
      for (int64_t j = 0; j < full_cols; j += kCols)
        block<C, kRows, kCols>(a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, k);
    if (full_cols < n) plain(a, lda, b + full_cols, ldb, c + full_cols, ldc, full_rows, n - full_cols, k);
    if (full_rows < m) plain(a + full_rows * lda, lda, b, ldb, c + full_rows * ldc, ldc, m - full_rows, n, k);
  }
}

}  // namespace hone::kernels::cpu
