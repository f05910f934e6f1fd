#include "hone/kernels/cpu/elementwise.hpp"

#include "hone/core/rng.hpp"
#include "hone/kernels/cpu/reduce.hpp"

namespace hone::kernels::cpu {

template <typename T>
void add(const T* a, const T* b, T* out, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = store<T>(load(a[i]) + load(b[i]));
}

template <typename T>
void add_inplace(T* x, const T* y, int64_t n) {
  add(x, y, x, n);
}

template <typename T>
void scale_inplace(T* x, int64_t n, double factor) {
  const auto f = compute_t<T>(factor);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] = store<T>(load(x[i]) * f);
}

template <typename From, typename To>
void cast(const From* src, To* dst, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i] = store<To>(compute_t<To>(load(src[i])));
}

void cast_f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_float(src[i]);
}

void cast_f32_to_f16(const float* src, uint16_t* dst, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_f16(src[i]);
}

template <typename T>
void add_bias(T* y, const compute_t<T>* bias, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    T* yr = y + row * cols;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) yr[j] = store<T>(load(yr[j]) + bias[j]);
  }
}

template <typename T>
void bias_backward(const T* dy, compute_t<T>* d_bias, int64_t rows, int64_t cols) {
  accumulate_rows(rows, cols, d_bias, [&](int64_t row, compute_t<T>* acc) {
    const T* g = dy + row * cols;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) acc[j] += load(g[j]);
  });
}

template <typename T>
void dropout(const T* x, T* out, int64_t n, double p, uint64_t seed, uint64_t stream, int64_t first) {
  const auto scale = compute_t<T>(1.0 / (1.0 - p));
  const uint32_t threshold = uint32_t(p * 4294967296.0);  // keep when the draw is >= p·2^32
  // Element i is element first + i of the whole: Philox block (first + i) / 4.
#pragma omp parallel for schedule(static)
  for (int64_t block = first / 4; block < (first + n + 3) / 4; ++block) {
    const auto r = philox4x32(seed, uint64_t(block), stream);
    for (int64_t k = 0; k < 4; ++k) {
      const int64_t i = block * 4 + k - first;
      if (i >= 0 && i < n) out[i] = store<T>(r[size_t(k)] >= threshold ? load(x[i]) * scale : compute_t<T>(0));
    }
  }
}

template <typename T>
void add_scaled_columns(T* dst, int64_t width, int64_t col, const T* src, int64_t rows, int64_t cols, double scale) {
  const auto f = compute_t<T>(scale);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    T* d = dst + r * width + col;
    const T* s = src + r * cols;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) d[j] = store<T>(load(d[j]) + f * load(s[j]));
  }
}

template <typename T>
void copy_scaled_columns(const T* src, int64_t width, int64_t col, T* dst, int64_t rows, int64_t cols, double scale) {
  const auto f = compute_t<T>(scale);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* s = src + r * width + col;
    T* d = dst + r * cols;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) d[j] = store<T>(f * load(s[j]));
  }
}

template <typename T>
double sum_squares(const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, double>) {
    return sum_elements(n, [&](int64_t i) { return x[i] * x[i]; });
  } else {
    // Squares summed in float within blocks of 256 (full-width vectors, 16 terms
    // a lane), the block sums in double: converting every element to double
    // instead runs at a third of the memory bandwidth. Fixed chunks, summed in
    // order, keep the result independent of the thread count. (Written out rather
    // than through sum_elements: behind a lambda, GCC 12 keeps the vector
    // accumulator in memory, which costs the same factor of three.)
    constexpr int64_t kBlock = 256, kChunk = 64 * kBlock;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    std::vector<double> partial(size_t(chunks), 0.0);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      double chunk_sum = 0;
      const int64_t chunk_end = std::min(n, (c + 1) * kChunk);
      for (int64_t begin = c * kChunk; begin < chunk_end; begin += kBlock) {
        const int64_t end = std::min(chunk_end, begin + kBlock);
        float sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t i = begin; i < end; ++i) {
          const float v = load(x[i]);
          sum += v * v;
        }
        chunk_sum += sum;
      }
      partial[size_t(c)] = chunk_sum;
    }
    double total = 0;
    for (double p : partial) total += p;
    return total;
  }
}

#define HONE_INSTANTIATE(T)                                  \
  template void add<T>(const T*, const T*, T*, int64_t);     \
  template void add_inplace<T>(T*, const T*, int64_t);       \
  template void scale_inplace<T>(T*, int64_t, double);       \
  template double sum_squares<T>(const T*, int64_t);                     \
  template void add_bias<T>(T*, const compute_t<T>*, int64_t, int64_t);  \
  template void bias_backward<T>(const T*, compute_t<T>*, int64_t, int64_t);     \
  template void dropout<T>(const T*, T*, int64_t, double, uint64_t, uint64_t, int64_t);                 \
  template void add_scaled_columns<T>(T*, int64_t, int64_t, const T*, int64_t, int64_t, double);        \
  template void copy_scaled_columns<T>(const T*, int64_t, int64_t, T*, int64_t, int64_t, double);
HONE_INSTANTIATE(float)
HONE_INSTANTIATE(double)
HONE_INSTANTIATE(bf16)
#undef HONE_INSTANTIATE
template void cast<float, bf16>(const float*, bf16*, int64_t);
template void cast<bf16, float>(const bf16*, float*, int64_t);
template void cast<float, double>(const float*, double*, int64_t);
template void cast<double, float>(const double*, float*, int64_t);

}  // namespace hone::kernels::cpu
