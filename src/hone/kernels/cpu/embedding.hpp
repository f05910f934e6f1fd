#pragma once
// Token (and learned position) embedding lookup.
#include <cstdint>

#include "hone/core/dtype.hpp"

namespace hone::kernels::cpu {

// out[b,t,:] = table[tokens[b,t], :] (+ positions[p, :] when given, p = t or
// token_positions[b,t] for packed sequences). Tables (W) hold master weights
// (compute_t<T>), or T itself for a frozen model kept in its compute dtype
// (LoRA's base in bf16); ids are checked by the caller. The table's `held` rows
// are the ids [first, first + held) (a tensor-parallel part of the vocabulary):
// other ids look up a row of zeros.
template <typename T, typename W>
void embedding_forward(const int32_t* tokens, const W* table, const W* positions, T* out,
                       int64_t batch, int64_t seq, int64_t dim, const int32_t* token_positions, int64_t first,
                       int64_t held);

// d_table[tokens[b,t], :] += d_out[b,t,:] (and d_positions[t, :] += ...), for
// the ids the table holds. Parallel over embedding columns, so each sum keeps
// row order: deterministic.
template <typename T>
void embedding_backward(const int32_t* tokens, const T* d_out, compute_t<T>* d_table, compute_t<T>* d_positions,
                        int64_t batch, int64_t seq, int64_t dim, const int32_t* token_positions, int64_t first,
                        int64_t held);

}  // namespace hone::kernels::cpu
