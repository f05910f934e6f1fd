#include "hone/kernels/cpu/norm.hpp"

#include <cmath>
#include <vector>

#include "hone/kernels/cpu/reduce.hpp"

namespace hone::kernels::cpu {

namespace {

// Row `row` of what a forward kernel normalizes: x's, or x + branch written to sum.
template <typename T>
const T* norm_input_row(const T* x, const T* branch, T* sum, int64_t row, int64_t dim) {
  const T* xr = x + row * dim;
  if (branch == nullptr) return xr;
  const T* br = branch + row * dim;
  T* sr = sum + row * dim;
#pragma omp simd
  for (int64_t j = 0; j < dim; ++j) sr[j] = store<T>(load(xr[j]) + load(br[j]));
  return sr;  // read again from the cache by the passes over the row
}

}  // namespace

template <typename T>
void rmsnorm_forward(const T* x, const T* branch, T* sum, const compute_t<T>* weight, T* y, compute_t<T>* rstd,
                     int64_t rows, int64_t dim, double eps) {
  using C = compute_t<T>;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    const T* xr = norm_input_row(x, branch, sum, row, dim);
    T* yr = y + row * dim;
    C sum_sq = 0;
#pragma omp simd reduction(+ : sum_sq)
    for (int64_t j = 0; j < dim; ++j) sum_sq += load(xr[j]) * load(xr[j]);
    const C r = C(1) / std::sqrt(sum_sq / C(dim) + C(eps));
    rstd[row] = r;
#pragma omp simd
    for (int64_t j = 0; j < dim; ++j) yr[j] = store<T>(load(xr[j]) * r * weight[j]);
  }
}

template <typename T>
void rmsnorm_backward(const T* dy, const T* x, const compute_t<T>* weight, const compute_t<T>* rstd, T* dx,
                      compute_t<T>* d_weight, int64_t rows, int64_t dim) {
  using C = compute_t<T>;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    const T* dyr = dy + row * dim;
    const T* xr = x + row * dim;
    T* dxr = dx + row * dim;
    const C r = rstd[row];
    C dot = 0;  // Σ_j (dy·w)_j · x̂_j
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < dim; ++j) dot += load(dyr[j]) * weight[j] * load(xr[j]) * r;
    dot /= C(dim);
#pragma omp simd
    for (int64_t j = 0; j < dim; ++j) {
      const C xhat = load(xr[j]) * r;
      dxr[j] = store<T>(load(dxr[j]) + r * (load(dyr[j]) * weight[j] - xhat * dot));
    }
  }
  if (d_weight == nullptr) return;  // a frozen weight
  accumulate_rows(rows, dim, d_weight, [&](int64_t row, C* acc) {
    const T* dyr = dy + row * dim;
    const T* xr = x + row * dim;
    const C r = rstd[row];
#pragma omp simd
    for (int64_t j = 0; j < dim; ++j) acc[j] += load(dyr[j]) * load(xr[j]) * r;
  });
}

template <typename T>
void layernorm_forward(const T* x, const T* branch, T* sum, const compute_t<T>* weight, const compute_t<T>* bias,
                       T* y, compute_t<T>* mean, compute_t<T>* rstd, int64_t rows, int64_t dim, double eps) {
  using C = compute_t<T>;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    const T* xr = norm_input_row(x, branch, sum, row, dim);
    T* yr = y + row * dim;
    C sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < dim; ++j) sum += load(xr[j]);
    const C mu = sum / C(dim);
    C sum_sq = 0;  // two passes: the variance of values far from 0 stays exact
#pragma omp simd reduction(+ : sum_sq)
    for (int64_t j = 0; j < dim; ++j) sum_sq += (load(xr[j]) - mu) * (load(xr[j]) - mu);
    const C r = C(1) / std::sqrt(sum_sq / C(dim) + C(eps));
    mean[row] = mu;
    rstd[row] = r;
#pragma omp simd
    for (int64_t j = 0; j < dim; ++j) {
      yr[j] = store<T>((load(xr[j]) - mu) * r * weight[j] + (bias ? bias[j] : C(0)));
    }
  }
}

template <typename T>
void layernorm_backward(const T* dy, const T* x, const compute_t<T>* weight, const compute_t<T>* mean,
                        const compute_t<T>* rstd, T* dx, compute_t<T>* d_weight, compute_t<T>* d_bias, int64_t rows,
                        int64_t dim) {
  using C = compute_t<T>;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    const T* dyr = dy + row * dim;
    const T* xr = x + row * dim;
    T* dxr = dx + row * dim;
    const C mu = mean[row], r = rstd[row];
    C sum_g = 0, sum_gx = 0;  // Σ (dy·w) and Σ (dy·w)·x̂
#pragma omp simd reduction(+ : sum_g, sum_gx)
    for (int64_t j = 0; j < dim; ++j) {
      const C g = load(dyr[j]) * weight[j];
      sum_g += g;
      sum_gx += g * (load(xr[j]) - mu) * r;
    }
    const C mean_g = sum_g / C(dim), mean_gx = sum_gx / C(dim);
#pragma omp simd
    for (int64_t j = 0; j < dim; ++j) {
      const C xhat = (load(xr[j]) - mu) * r;
      dxr[j] = store<T>(load(dxr[j]) + r * (load(dyr[j]) * weight[j] - mean_g - xhat * mean_gx));
    }
  }
  if (d_weight == nullptr) return;  // frozen weight (and bias)
  // One pass for both parameter gradients: columns [0, dim) weight, [dim, 2·dim) bias.
  const int64_t width = d_bias ? 2 * dim : dim;
  std::vector<C> sums(size_t(width), C(0));
  accumulate_rows(rows, width, sums.data(), [&](int64_t row, C* acc) {
    const T* dyr = dy + row * dim;
    const T* xr = x + row * dim;
    const C mu = mean[row], r = rstd[row];
#pragma omp simd
    for (int64_t j = 0; j < dim; ++j) acc[j] += load(dyr[j]) * (load(xr[j]) - mu) * r;
    if (d_bias) {
#pragma omp simd
      for (int64_t j = 0; j < dim; ++j) acc[dim + j] += load(dyr[j]);
    }
  });
  for (int64_t j = 0; j < dim; ++j) d_weight[j] += sums[size_t(j)];
  if (d_bias) {
    for (int64_t j = 0; j < dim; ++j) d_bias[j] += sums[size_t(dim + j)];
  }
}

#define HONE_INSTANTIATE(T)                                                                                        \
  template void rmsnorm_forward<T>(const T*, const T*, T*, const compute_t<T>*, T*, compute_t<T>*, int64_t, int64_t, \
                                   double);                                                                         \
  template void rmsnorm_backward<T>(const T*, const T*, const compute_t<T>*, const compute_t<T>*, T*,               \
                                    compute_t<T>*, int64_t, int64_t);                                               \
  template void layernorm_forward<T>(const T*, const T*, T*, const compute_t<T>*, const compute_t<T>*, T*,         \
                                     compute_t<T>*, compute_t<T>*, int64_t, int64_t, double);                       \
  template void layernorm_backward<T>(const T*, const T*, const compute_t<T>*, const compute_t<T>*,                 \
                                      const compute_t<T>*, T*, compute_t<T>*, compute_t<T>*, int64_t, int64_t);
HONE_INSTANTIATE(float)
HONE_INSTANTIATE(double)
HONE_INSTANTIATE(bf16)
#undef HONE_INSTANTIATE

}  // namespace hone::kernels::cpu
