#pragma once
// Causal self-attention with grouped-query heads and optional ALiBi, computed in
// blocks of queries: a block's scores against the keys it can see are one GEMM
// (oneDNN: AMX / AVX-512 BF16 where present), softmaxed, then multiplied by V in
// another. Only one block's scores exist at a time per thread (memory linear in
// seq, never seq×seq); the forward pass keeps each query's logsumexp for the
// backward pass, which recomputes the probabilities block by block.
#include <cstdint>

#include "hone/core/dtype.hpp"

namespace hone::kernels::cpu {

struct AttentionDims {
  int64_t batch = 0, seq = 0;
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  double scale = 0;  // multiplies q·k, usually 1/sqrt(head_dim)
  // Packed sequences: each token's position within its own sample, [batch, seq]
  // (null: one sample per row). Query t sees keys [t - positions[t], t] only.
  const int32_t* positions = nullptr;
};

// qkv is [batch, seq, (n_heads + 2·n_kv_heads)·head_dim]: query heads, key heads,
// value heads. Query head h reads key/value head h / (n_heads / n_kv_heads).
// out is [batch, seq, n_heads·head_dim]; lse is [batch, n_heads, seq].
// alibi_slopes (null, or one per query head) adds slope·(key_pos - query_pos).
template <typename T>
void attention_forward(const T* qkv, T* out, compute_t<T>* lse, const compute_t<T>* alibi_slopes,
                       const AttentionDims& dims);

// Writes d_qkv (same layout as qkv) from d_out and the forward's out and lse.
template <typename T>
void attention_backward(const T* d_out, const T* qkv, const T* out, const compute_t<T>* lse,
                        const compute_t<T>* alibi_slopes, T* d_qkv, const AttentionDims& dims);

// One new query per sequence against a key/value cache (decoding). Row i of q
// (stride q_row_stride) is the query of a token at position positions[i] of
// cache slot slots[i]; it attends to that slot's positions [0, positions[i]].
// The caches are [slots, capacity, n_kv_heads·head_dim]; out is [rows, n_heads·head_dim].
struct DecodeDims {
  int64_t rows = 0, capacity = 0;
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t q_row_stride = 0;
  double scale = 0;
};
template <typename T>
void attention_decode(const T* q, const T* k_cache, const T* v_cache, const int32_t* slots, const int32_t* positions,
                      const compute_t<T>* alibi_slopes, T* out, const DecodeDims& dims);
// Decoding's cache update: writes the key and value heads of row i of a fused
// qkv (stride dims.q_row_stride) into the caches at [slots[i], positions[i]].
template <typename T>
void kv_cache_write(const T* qkv, T* k_cache, T* v_cache, const int32_t* slots, const int32_t* positions,
                    const DecodeDims& dims);

}  // namespace hone::kernels::cpu
