#pragma once
// Attention through cuDNN's fused flash-attention engines: the pass is
// described to cuDNN's backend API as an operation graph (Q·Kᵀ, the scale,
// ALiBi's bias where the model has it, the causal mask and packed samples'
// masks, the softmax with its logsumexp, P·V; and in backward the
// recomputed probabilities and the four products of the gradients), which
// cuDNN matches with a fused engine tuned for the GPU. It takes what hone's own
// bf16 kernels (attention_mma.cu) take: bf16, head size 64 or 128, 16-byte
// aligned rows, compute capability 8.0 or more; and it takes sequence lengths
// that are multiples of 128 (it compiles
// kernels per shape: training's lengths, not every prompt's). cuDNN
// (libcudnn.so.9) is opened on first use; where it cannot be opened, or finds
// no engine for a shape, the call returns false and the caller runs hone's
// kernels (a one-line notice says why, once per process and shape).
//
// Outputs have the meaning of hone's kernels: the same out, lse (natural-log
// logsumexp of the scaled scores per query, [batch, heads, seq]) and d_qkv, so
// either backward pass can follow either forward pass. cuDNN's backward pass
// may add partial sums in a different order from run to run (its dQ), unlike
// hone's kernels.
#include <string>

#include "hone/kernels/cpu/attention.hpp"

namespace hone::kernels::cuda {

using cpu::AttentionDims;

// Which kernels bf16 attention tries first: cuDNN's unless HONE_CUDA_ATTENTION=hone
// (read once; set_attention_kernels() overrides it, for tests and benchmarks).
enum class AttentionKernels { cudnn, hone };
AttentionKernels attention_kernels();
void set_attention_kernels(AttentionKernels kernels);

// Each runs the pass through cuDNN and returns true, or returns false (having
// written nothing, or, where a plan failed to run, outputs the caller's kernels
// then overwrite): another kernel choice, a call outside what cuDNN takes here
// (other head sizes or lengths, unaligned rows), no
// cuDNN library, or no engine for the shape. Pointers are device memory;
// shapes as in kernels/cpu/attention.hpp.
bool cudnn_attention_forward(const bf16* qkv, bf16* out, float* lse, const float* alibi_slopes,
                             const AttentionDims& dims);
bool cudnn_attention_backward(const bf16* d_out, const bf16* qkv, const bf16* out, const float* lse,
                              const float* alibi_slopes, bf16* d_qkv, const AttentionDims& dims);

// Whether hone was built with cuDNN's headers (without them, hone's kernels
// take every call).
bool cudnn_attention_built();

// What cuDNN's backward pass allocates besides its engine's own workspace
// (dQ's f32 sums and the dO·O row sums) for a call it takes, else 0; for the
// memory estimate, which cannot know before planning whether cuDNN loads.
size_t cudnn_attention_scratch_bytes(const AttentionDims& dims);

// Builds both passes' plans (with ALiBi's bias or without; over packed samples
// where dims.positions is not null, which is never read) for a GPU described by
// cuDNN's device-properties JSON, without that GPU (cuDNN 9.8 or later): ""
// when cuDNN plans both, else why not. Checks the graphs on machines that have
// cuDNN's library but no GPU.
std::string plan_cudnn_attention(const std::string& device_properties, const AttentionDims& dims, bool alibi);

}  // namespace hone::kernels::cuda
