#include "hone/kernels/cpu/cross_entropy.hpp"

#include "hone/kernels/cpu/fast_math.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace hone::kernels::cpu {

namespace {

// A row's logsumexp over cache-sized chunks: each chunk's max, then its sum of
// exp relative to that max, merged into the running (max, sum). The logits are
// read from memory once; the second look at a chunk hits the cache.
template <typename T>
compute_t<T> row_logsumexp(const T* z, int64_t vocab) {
  using C = compute_t<T>;
  constexpr int64_t kChunk = 2048;
  C max = -std::numeric_limits<C>::infinity(), sum = 0;
  for (int64_t begin = 0; begin < vocab; begin += kChunk) {
    const int64_t end = std::min(vocab, begin + kChunk);
    C chunk_max = -std::numeric_limits<C>::infinity();
#pragma omp simd reduction(max : chunk_max)
    for (int64_t j = begin; j < end; ++j) chunk_max = fast_max(chunk_max, load(z[j]));
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
  return max + std::log(sum);
}

// The held target's column, or -1 where another part of the vocabulary holds it.
int64_t held_target(int32_t target, int64_t vocab, int64_t first) {
  const int64_t t = int64_t(target) - first;
  return t >= 0 && t < vocab ? t : -1;
}

// In place: z becomes s · (softmax(z) - onehot(target)), or 0 for an ignored row.
template <typename T>
void row_gradient(T* z, int32_t target, compute_t<T> lse, compute_t<T> s, int64_t vocab, int32_t ignore_index,
                  int64_t first) {
  using C = compute_t<T>;
  if (target == ignore_index) {
    std::fill_n(z, vocab, store<T>(C(0)));
    return;
  }
  const int64_t held = held_target(target, vocab, first);
  const C target_grad = held >= 0 ? s * (fast_exp(load(z[held]) - lse) - C(1)) : C(0);
#pragma omp simd
  for (int64_t j = 0; j < vocab; ++j) z[j] = store<T>(s * fast_exp(load(z[j]) - lse));
  if (held >= 0) z[held] = store<T>(target_grad);
}

// lse[row] and losses[row] of one row.
template <typename T>
void row_loss(const T* z, int32_t target, compute_t<T>& loss, compute_t<T>& lse, int64_t vocab,
              int32_t ignore_index, int64_t first) {
  using C = compute_t<T>;
  lse = row_logsumexp(z, vocab);
  const int64_t held = held_target(target, vocab, first);
  loss = target == ignore_index ? C(0) : lse - (held >= 0 ? load(z[held]) : C(0));
}

}  // namespace

template <typename T>
void cross_entropy_forward(const T* logits, const int32_t* targets, compute_t<T>* losses, compute_t<T>* lse,
                           int64_t rows, int64_t vocab, int64_t ld, int32_t ignore_index, int64_t first) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < rows; ++row)
    row_loss(logits + row * ld, targets[row], losses[row], lse[row], vocab, ignore_index, first);
}

template <typename T>
void cross_entropy_backward(T* logits, const int32_t* targets, const compute_t<T>* lse, double scale, int64_t rows,
                            int64_t vocab, int64_t ld, int32_t ignore_index, int64_t first,
                            const compute_t<T>* row_weights) {
  using C = compute_t<T>;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    const C row_scale = row_weights ? C(scale) * row_weights[row] : C(scale);
    T* z = logits + row * ld;
    row_gradient(z, targets[row], lse[row], row_scale, vocab, ignore_index, first);
    std::fill(z + vocab, z + ld, store<T>(C(0)));
  }
}

template <typename T>
void cross_entropy_forward_backward(T* logits, const int32_t* targets, compute_t<T>* losses, compute_t<T>* lse,
                                    double scale, int64_t rows, int64_t vocab, int64_t ld, int32_t ignore_index) {
  using C = compute_t<T>;
#pragma omp parallel
  {
    // The row's exp(z - max), kept (a vocabulary of f32 fits in L2) so that the
    // gradient is a multiply: one exp per logit instead of the two that the
    // separate passes take, which made up most of this op's time.
    std::vector<C> row_exps(static_cast<size_t>(vocab));
    C* exps = row_exps.data();
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; ++row) {
      T* z = logits + row * ld;
      std::fill(z + vocab, z + ld, store<T>(C(0)));
      const int32_t target = targets[row];
      C max = -std::numeric_limits<C>::infinity();
#pragma omp simd reduction(max : max)
      for (int64_t j = 0; j < vocab; ++j) max = fast_max(max, load(z[j]));
      C sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < vocab; ++j) sum += exps[j] = fast_exp(load(z[j]) - max);
      lse[row] = max + std::log(sum);
      if (target == ignore_index) {
        losses[row] = 0;
        std::fill(z, z + vocab, store<T>(C(0)));
        continue;
      }
      const int64_t held = held_target(target, vocab, 0);
      losses[row] = lse[row] - (held >= 0 ? load(z[held]) : C(0));
      const C s = C(scale) / sum;
#pragma omp simd
      for (int64_t j = 0; j < vocab; ++j) z[j] = store<T>(s * exps[j]);
      if (held >= 0) z[held] = store<T>(s * exps[held] - C(scale));
    }
  }
}

#define HONE_INSTANTIATE(T)                                                                                        \
  template void cross_entropy_forward<T>(const T*, const int32_t*, compute_t<T>*, compute_t<T>*, int64_t,          \
                                         int64_t, int64_t, int32_t, int64_t);                                      \
  template void cross_entropy_backward<T>(T*, const int32_t*, const compute_t<T>*, double, int64_t, int64_t,        \
                                          int64_t, int32_t, int64_t, const compute_t<T>*);                         \
  template void cross_entropy_forward_backward<T>(T*, const int32_t*, compute_t<T>*, compute_t<T>*, double, int64_t, \
                                                  int64_t, int64_t, int32_t);
HONE_INSTANTIATE(float)
HONE_INSTANTIATE(double)
HONE_INSTANTIATE(bf16)
#undef HONE_INSTANTIATE

}  // namespace hone::kernels::cpu
