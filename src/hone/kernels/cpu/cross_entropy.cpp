#include "hone/kernels/cpu/cross_entropy.hpp"

#include "hone/kernels/cpu/fast_math.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace hone::kernels::cpu {

template <typename T>
void cross_entropy_forward(const T* logits, const int32_t* targets, compute_t<T>* losses, compute_t<T>* lse,
                           int64_t rows, int64_t vocab, int32_t ignore_index, int64_t first) {
  using C = compute_t<T>;
  // A row's logsumexp over cache-sized chunks: each chunk's max, then its sum of
  // exp relative to that max, merged into the running (max, sum). The logits are
  // read from memory once; the second look at a chunk hits the cache.
  constexpr int64_t kChunk = 2048;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    const T* z = logits + row * vocab;
    C max = -std::numeric_limits<C>::infinity(), sum = 0;
    for (int64_t begin = 0; begin < vocab; begin += kChunk) {
      const int64_t end = std::min(vocab, begin + kChunk);
      C chunk_max = -std::numeric_limits<C>::infinity();
#pragma omp simd reduction(max : chunk_max)
      for (int64_t j = begin; j < end; ++j) chunk_max = std::max(chunk_max, load(z[j]));
      C chunk_sum = 0;
#pragma omp simd reduction(+ : chunk_sum)
      for (int64_t j = begin; j < end; ++j) chunk_sum += fast_exp(load(z[j]) - chunk_max);
      if (chunk_max > max) {
        sum = sum * fast_exp(max - chunk_max) + chunk_sum;
        max = chunk_max;
      } else {
        sum += chunk_sum * fast_exp(chunk_max - max);
      }
    }
    lse[row] = max + std::log(sum);
    const int64_t target = int64_t(targets[row]) - first;
    const bool held = target >= 0 && target < vocab;
    losses[row] = targets[row] == ignore_index ? C(0) : lse[row] - (held ? load(z[target]) : C(0));
  }
}

template <typename T>
void cross_entropy_backward(T* logits, const int32_t* targets, const compute_t<T>* lse, double scale, int64_t rows,
                            int64_t vocab, int32_t ignore_index, int64_t first) {
  using C = compute_t<T>;
  const C s = C(scale);
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    T* z = logits + row * vocab;
    if (targets[row] == ignore_index) {
      std::fill(z, z + vocab, store<T>(C(0)));
      continue;
    }
    const int64_t target = int64_t(targets[row]) - first;
    const bool held = target >= 0 && target < vocab;
    const C l = lse[row];
    const C target_grad = held ? s * (fast_exp(load(z[target]) - l) - C(1)) : C(0);
#pragma omp simd
    for (int64_t j = 0; j < vocab; ++j) z[j] = store<T>(s * fast_exp(load(z[j]) - l));
    if (held) z[target] = store<T>(target_grad);
  }
}

#define HONE_INSTANTIATE(T)                                                                                 \
  template void cross_entropy_forward<T>(const T*, const int32_t*, compute_t<T>*, compute_t<T>*, int64_t,   \
                                         int64_t, int32_t, int64_t);                                        \
  template void cross_entropy_backward<T>(T*, const int32_t*, const compute_t<T>*, double, int64_t, int64_t, \
                                          int32_t, int64_t);
HONE_INSTANTIATE(float)
HONE_INSTANTIATE(double)
HONE_INSTANTIATE(bf16)
#undef HONE_INSTANTIATE

}  // namespace hone::kernels::cpu
