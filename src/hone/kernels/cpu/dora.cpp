#include "hone/kernels/cpu/dora.hpp"

#include <cmath>
#include <vector>

#include "hone/kernels/cpu/reduce.hpp"

namespace hone::kernels::cpu {

template <typename T>
void dora_norms(const T* weight, int64_t rows, int64_t in, const compute_t<T>* a, const compute_t<T>* b,
                int64_t rank, double s, const compute_t<T>* magnitude, compute_t<T>* scale, compute_t<T>* inv_norm,
                compute_t<T>* norms) {
  using C = compute_t<T>;
#pragma omp parallel
  {
    std::vector<C> row(static_cast<size_t>(in));  // w_i + s·(B·A)_i, one row at a time
#pragma omp for schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      const T* w = weight + i * in;
#pragma omp simd
      for (int64_t j = 0; j < in; ++j) row[size_t(j)] = load(w[j]);
      for (int64_t r = 0; r < rank; ++r) {
        const auto sb = C(s * double(b[i * rank + r]));
        const C* ar = a + r * in;
#pragma omp simd
        for (int64_t j = 0; j < in; ++j) row[size_t(j)] += sb * ar[j];
      }
      double sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < in; ++j) sum += double(row[size_t(j)]) * double(row[size_t(j)]);
      const C norm = C(std::sqrt(sum));
      inv_norm[i] = C(1.0 / double(norm));
      scale[i] = C(double(magnitude[i]) / double(norm));
      if (norms) norms[i] = norm;
    }
  }
}

template <typename M>
void scale_rows(M* x, int64_t rows, int64_t cols, const M* factor) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i) {
    M* row = x + i * cols;
    const M f = factor[i];
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) row[j] *= f;
  }
}

template <typename T>
void dora_scale_forward(T* y, int64_t width, int64_t col, int64_t rows, int64_t cols, const compute_t<T>* scale,
                        const compute_t<T>* bias, T* z) {
  using C = compute_t<T>;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    T* out = y + r * width + col;
    T* kept = z + r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const C b = bias ? bias[j] : C(0);
      const C value = load(out[j]) - b;
      kept[j] = store<T>(value);
      out[j] = store<T>(scale[j] * value + b);
    }
  }
}

template <typename T>
void dora_scale_backward(T* dy, int64_t width, int64_t col, int64_t rows, int64_t cols, const T* z,
                         const compute_t<T>* scale, const compute_t<T>* inv_norm, compute_t<T>* d_magnitude) {
  using C = compute_t<T>;
  std::vector<C> sums(size_t(cols), C(0));
  // Each row once: its part of the sums, then its gradient rescaled in place.
  accumulate_rows(rows, cols, sums.data(), [&](int64_t r, C* acc) {
    T* g = dy + r * width + col;
    const T* kept = z + r * cols;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) {
      const C gj = load(g[j]);
      acc[j] += gj * load(kept[j]);
      g[j] = store<T>(gj * scale[j]);
    }
  });
  for (int64_t j = 0; j < cols; ++j) d_magnitude[j] += sums[size_t(j)] * inv_norm[j];
}

template void scale_rows<float>(float*, int64_t, int64_t, const float*);
template void scale_rows<double>(double*, int64_t, int64_t, const double*);
#define HONE_INSTANTIATE(T)                                                                                   \
  template void dora_norms<T>(const T*, int64_t, int64_t, const compute_t<T>*, const compute_t<T>*, int64_t,      \
                              double, const compute_t<T>*, compute_t<T>*, compute_t<T>*, compute_t<T>*);          \
  template void dora_scale_forward<T>(T*, int64_t, int64_t, int64_t, int64_t, const compute_t<T>*,           \
                                      const compute_t<T>*, T*);                                               \
  template void dora_scale_backward<T>(T*, int64_t, int64_t, int64_t, int64_t, const T*, const compute_t<T>*, \
                                       const compute_t<T>*, compute_t<T>*);
HONE_INSTANTIATE(float)
HONE_INSTANTIATE(double)
HONE_INSTANTIATE(bf16)
#undef HONE_INSTANTIATE

}  // namespace hone::kernels::cpu
