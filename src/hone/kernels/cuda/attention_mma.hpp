#pragma once
// Attention on the tensor cores (bf16 operands, fp32 accumulation) for the
// common case: bf16 tensors, head size 64 or 128, 16-byte aligned rows, a GPU
// of compute capability 8.0 or more with the shared memory the pass needs.
// attention.cu sends a call here when mma_attention_fits() and keeps its
// CUDA-core kernels for everything else.
// Same semantics and outputs as those: causal, grouped-query heads, ALiBi,
// packed-sequence windows; lse per query; no atomics in the backward pass.
#include <initializer_list>

#include "hone/core/dtype.hpp"
#include "hone/kernels/cuda/attention_shape.cuh"

namespace hone::kernels::cuda {

enum class AttentionPass { forward, backward };

// Whether the tensor-core kernels take a pass of shape `s` on these buffers,
// their shared memory included (else the CUDA-core kernels run).
bool mma_attention_fits(const AttentionShape& s, AttentionPass pass, std::initializer_list<const void*> buffers);

void mma_attention_forward(const bf16* qkv, bf16* out, float* lse, const AttentionShape& s);
// Writes every element of d_qkv; delta[b, h, t] = dO·O per query (attention.cu computes it).
void mma_attention_backward(const bf16* d_out, const bf16* qkv, const float* lse, const float* delta, bf16* d_qkv,
                            const AttentionShape& s);

}  // namespace hone::kernels::cuda
