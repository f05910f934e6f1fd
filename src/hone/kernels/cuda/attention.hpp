#pragma once
// Causal self-attention on the GPU with the semantics of
// kernels/cpu/attention.hpp: fused qkv, grouped-query heads, ALiBi slopes,
// packed-sequence windows; FlashAttention-2's algorithm (tiles of queries and
// keys, an online softmax, only the logsumexp kept; the backward pass recomputes
// the probabilities). Head dimensions up to 256. All pointers are device memory,
// including dims.positions and the decode slots and positions.
#include <cstdint>

#include "hone/kernels/cpu/attention.hpp"

namespace hone::kernels::cuda {

using cpu::AttentionDims;
using cpu::DecodeDims;

template <typename T>
void attention_forward(const T* qkv, T* out, float* lse, const float* alibi_slopes, const AttentionDims& dims);
// Writes d_qkv (every element) from d_out and the forward's out and lse. No
// atomics: key/value gradients and query gradients come from two kernels that
// each own what they write, so results are the same on every run.
template <typename T>
void attention_backward(const T* d_out, const T* qkv, const T* out, const float* lse, const float* alibi_slopes,
                        T* d_qkv, const AttentionDims& dims);
template <typename T>
void attention_decode(const T* q, const T* k_cache, const T* v_cache, const int32_t* slots, const int32_t* positions,
                      const float* alibi_slopes, T* out, const DecodeDims& dims);
template <typename T>
void kv_cache_write(const T* qkv, T* k_cache, T* v_cache, const int32_t* slots, const int32_t* positions,
                    const DecodeDims& dims);

}  // namespace hone::kernels::cuda
