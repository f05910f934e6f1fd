#include "hone/kernels/cpu/rope.hpp"

namespace hone::kernels::cpu {

template <typename T>
void rope_apply(T* x, const compute_t<T>* cos, const compute_t<T>* sin, int64_t batch, int64_t seq, int64_t heads,
                int64_t head_dim, int64_t row_stride, int64_t position_offset, bool inverse,
                const int32_t* positions) {
  using C = compute_t<T>;
  const int64_t half = head_dim / 2;
  const C sign = inverse ? C(-1) : C(1);
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < batch * seq; ++row) {
    const int64_t position = positions ? int64_t(positions[row]) : position_offset + row % seq;
    const C* c = cos + position * half;
    const C* s = sin + position * half;
    for (int64_t h = 0; h < heads; ++h) {
      T* v = x + row * row_stride + h * head_dim;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const C x1 = load(v[i]), x2 = load(v[i + half]);
        v[i] = store<T>(x1 * c[i] - sign * x2 * s[i]);
        v[i + half] = store<T>(x2 * c[i] + sign * x1 * s[i]);
      }
    }
  }
}

template void rope_apply<float>(float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                int64_t, bool, const int32_t*);
template void rope_apply<double>(double*, const double*, const double*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                 int64_t, bool, const int32_t*);
template void rope_apply<bf16>(bf16*, const float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                               bool, const int32_t*);

}  // namespace hone::kernels::cpu
