#pragma once
// Deterministic reductions: rows (or elements) are cut into fixed-size chunks,
// each chunk is summed on its own (in parallel), and the chunk sums are added in
// order. The result depends on the data only, never on the thread count.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "hone/core/parallel.hpp"

namespace hone::kernels::cpu {

// out[0, width) += Σ_r contribution of row r, where add_row(r, acc) adds row r's
// contribution into acc[0, width).
template <typename Acc, typename AddRow>
void accumulate_rows(int64_t rows, int64_t width, Acc* out, AddRow&& add_row) {
  const int64_t chunks = (rows + kReductionChunkRows - 1) / kReductionChunkRows;
  std::vector<Acc> partial(size_t(chunks * width), Acc(0));
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    Acc* acc = partial.data() + c * width;
    const int64_t end = std::min(rows, (c + 1) * kReductionChunkRows);
    for (int64_t r = c * kReductionChunkRows; r < end; ++r) add_row(r, acc);
  }
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < width; ++j) {
    Acc sum = 0;
    for (int64_t c = 0; c < chunks; ++c) sum += partial[size_t(c * width + j)];
    out[j] += sum;
  }
}

// Σ_{i<n} term(i) in double.
template <typename Term>
double sum_elements(int64_t n, Term&& term) {
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(size_t(chunks), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    double sum = 0.0;
    const int64_t end = std::min(n, (c + 1) * kChunk);
#pragma omp simd reduction(+ : sum)
    for (int64_t i = c * kChunk; i < end; ++i) sum += term(i);
    partial[size_t(c)] = sum;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace hone::kernels::cpu
