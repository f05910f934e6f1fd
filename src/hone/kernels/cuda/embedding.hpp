#pragma once
// Token (and learned position) embeddings on the GPU, with the semantics of
// kernels/cpu/embedding.hpp. Token ids are device memory, so the forward pass
// checks them on the device and reports the first id outside the vocabulary.
#include <cstdint>

#include "hone/core/dtype.hpp"

namespace hone::kernels::cuda {

struct BadToken {
  int64_t index = -1;  // the first (flat) index holding an id outside [0, vocab); -1: none
  int32_t id = 0;
};

// out[b,t,:] = table[tokens[b,t], :] (+ positions[p, :], p = t or
// token_positions[b,t]); table is [held, dim], the ids [first, first + held)
// of a vocabulary of `vocab` (other ids look up zeros). Tables (W) are f32, or
// T for a frozen model kept in its compute dtype. Waits for the check's result.
template <typename T, typename W>
BadToken embedding_forward(const int32_t* tokens, const W* table, int64_t first, int64_t held, int64_t vocab,
                           const W* positions, T* out, int64_t batch, int64_t seq, int64_t dim,
                           const int32_t* token_positions);

// d_table[tokens[b,t], :] += d_out[b,t,:] for the ids the table holds (and
// d_positions[p, :] += ...), each sum in row order: deterministic, as on the
// CPU. Threads own (column, set of table rows) pairs, so no two write one place
// and no atomics are needed. At most INT32_MAX rows (batch·seq).
template <typename T>
void embedding_backward(const int32_t* tokens, const T* d_out, float* d_table, int64_t first, int64_t held,
                        float* d_positions, int64_t n_positions, int64_t batch, int64_t seq, int64_t dim,
                        const int32_t* token_positions);

}  // namespace hone::kernels::cuda
