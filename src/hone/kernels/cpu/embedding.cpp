#include "hone/kernels/cpu/embedding.hpp"

#include <algorithm>

namespace hone::kernels::cpu {

template <typename T, typename W>
void embedding_forward(const int32_t* tokens, const W* table, const W* positions, T* out, int64_t batch, int64_t seq,
                       int64_t dim, const int32_t* token_positions, int64_t first, int64_t held) {
  using C = compute_t<T>;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < batch * seq; ++row) {
    const int64_t id = int64_t(tokens[row]) - first;
    const W* tok = id >= 0 && id < held ? table + id * dim : nullptr;
    const int64_t p = token_positions ? int64_t(token_positions[row]) : row % seq;
    const W* pos = positions ? positions + p * dim : nullptr;
    T* o = out + row * dim;
    for (int64_t j = 0; j < dim; ++j) {
      o[j] = store<T>((tok ? C(load(tok[j])) : C(0)) + (pos ? C(load(pos[j])) : C(0)));
    }
  }
}

template <typename T>
void embedding_backward(const int32_t* tokens, const T* d_out, compute_t<T>* d_table, compute_t<T>* d_positions,
                        int64_t batch, int64_t seq, int64_t dim, const int32_t* token_positions, int64_t first,
                        int64_t held) {
  constexpr int64_t kColumns = 64;
  const int64_t column_blocks = (dim + kColumns - 1) / kColumns;
#pragma omp parallel for schedule(static)
  for (int64_t block = 0; block < column_blocks; ++block) {
    const int64_t j0 = block * kColumns, j1 = std::min(dim, j0 + kColumns);
    for (int64_t row = 0; row < batch * seq; ++row) {
      const T* g = d_out + row * dim;
      const int64_t id = int64_t(tokens[row]) - first;
      if (id >= 0 && id < held) {
        compute_t<T>* tok = d_table + id * dim;
        for (int64_t j = j0; j < j1; ++j) tok[j] += load(g[j]);
      }
      if (d_positions) {
        const int64_t p = token_positions ? int64_t(token_positions[row]) : row % seq;
        compute_t<T>* pos = d_positions + p * dim;
        for (int64_t j = j0; j < j1; ++j) pos[j] += load(g[j]);
      }
    }
  }
}

#define HONE_INSTANTIATE_FORWARD(T, W)                                                                           \
  template void embedding_forward<T, W>(const int32_t*, const W*, const W*, T*, int64_t, int64_t, int64_t,        \
                                        const int32_t*, int64_t, int64_t);
HONE_INSTANTIATE_FORWARD(float, float)
HONE_INSTANTIATE_FORWARD(double, double)
HONE_INSTANTIATE_FORWARD(bf16, float)
HONE_INSTANTIATE_FORWARD(bf16, bf16)
#undef HONE_INSTANTIATE_FORWARD

#define HONE_INSTANTIATE(T)                                                                                   \
  template void embedding_backward<T>(const int32_t*, const T*, compute_t<T>*, compute_t<T>*, int64_t, int64_t, \
                                      int64_t, const int32_t*, int64_t, int64_t);
HONE_INSTANTIATE(float)
HONE_INSTANTIATE(double)
HONE_INSTANTIATE(bf16)
#undef HONE_INSTANTIATE

}  // namespace hone::kernels::cpu
