#pragma once
// Every tensor one training step needs, planned from (config, dtype, batch, seq)
// into one arena before the first step. Per-layer tensors are what the backward
// pass reads; the shared scratch is reused by every layer.
#include <cstdint>
#include <vector>

#include "hone/core/arena.hpp"
#include "hone/model/config.hpp"

namespace hone {

// Shapes for one rank. Tensor parallelism over tp ranks (sequence parallel):
// the residual stream and what norms read and write are this rank's B·T/tp rows
// ([B·T/tp, D]; [B, T, D] without tp), the tensors named `_all` all rows
// (without tp the same tensor as their row part; with tp the row parts of the
// norms' outputs are one scratch, read only by the gather), and H, KV and
// ffn_dim are this rank's heads/tp and ffn_dim/tp.
struct LayerActivations {
  Tensor input;  // residual stream entering the layer [B, T, D]
  Tensor attn_norm, attn_norm_mean, attn_norm_rstd;  // mean only for LayerNorm
  Tensor attn_norm_all;                              // what qkv reads
  Tensor qkv;                                        // after RoPE [B, T, (H + 2·KV)·hd]
  Tensor attn, attn_lse;                             // [B, T, H·hd], [B, H, T]
  Tensor mid;                                        // residual stream after attention
  Tensor mlp_norm, mlp_norm_mean, mlp_norm_rstd;
  Tensor mlp_norm_all;                               // what up reads
  Tensor mlp_up;   // [B, T, mlp_up_dim]: pre-activation (gate | up for SwiGLU)
  Tensor mlp_act;  // [B, T, ffn_dim]
};

struct Activations {
  int64_t batch = 0, seq = 0;
  // Rows of the MLP's tensors (mlp_norm to mlp_act, d_mlp_act): all B·T rows,
  // or under activation checkpointing without tp a chunk of them
  // (mlp_chunk_rows); the MLP runs chunk by chunk.
  int64_t mlp_rows = 0;
  std::vector<LayerActivations> layers;
  Tensor output;  // residual stream after the last layer
  Tensor final_norm, final_norm_mean, final_norm_rstd;
  // The output projection's input and output. A split vocabulary
  // (ModelConfig::splits_vocabulary) computes the logits of all B·T rows for
  // this rank's V/tp classes, from the gathered final norm; otherwise the
  // projection reads final_norm itself and computes this rank's rows.
  Tensor final_norm_all;
  // [chunk rows, classes (padded: ActivationOptions::padded_logit_rows)]: the
  // output head and the loss run over the rows in chunks of this many
  // (logits_chunk_rows), each chunk's logits turned into their gradient in place.
  Tensor logits;
  Tensor token_losses, logits_lse;   // [rows], compute dtype
  // Scratch shared by all layers.
  Tensor branch;      // a projection's output before it joins the residual stream
  Tensor branch_all;  // tp: out's and down's partial sums, before the reduce-scatter
  Tensor d_residual;  // gradient of the residual stream
  Tensor d_residual_all;
  Tensor d_norm;      // gradient of a norm's output
  Tensor d_norm_all;  // tp: qkv's and up's partial sums, before the reduce-scatter
  // (The MLP's input gradient overwrites its input, mlp_up.) Under activation
  // checkpointing d_attn and d_qkv, and also final_norm(_all) and logits, lie
  // in the memory of the MLP's working set (mlp_norm to mlp_act), each set
  // live when the others are not (plan_activations).
  Tensor d_attn, d_qkv, d_mlp_act;
};

// Row-wise work runs over chunks of rows whose widest tensor takes at most this
// many bytes by default: the output head and the loss (Llama 3's 128256
// classes at 2 x 2048 tokens are 0.98 GiB of bf16 logits), and under activation
// checkpointing the MLP (Llama 3.1 8B's [B·T, 2·14336] pre-activation, 224 MiB).
inline constexpr size_t kChunkBytes = size_t(64) << 20;
// ... except a trained output head's: its weight gradient, f32 [vocab, dim], is
// read and written once a chunk whatever the chunk's rows, while the product
// adds 2·rows FLOP per element. At 256 rows (Llama 3's 64 MiB of bf16 logits)
// that traffic took three times the product's time on an H200; from 2048 rows on
// the product outweighs it.
inline constexpr int64_t kTrainedHeadChunkRows = 2048;
// No limit: all rows at once (a forward pass without targets returns the
// logits of all rows).
inline constexpr size_t kNoChunks = SIZE_MAX;

struct ActivationOptions {
  // Activation checkpointing: only each layer's input is kept per layer; all
  // other per-layer tensors share one working set, which the backward pass
  // refills by recomputing each layer's forward pass.
  bool checkpointing = false;
  // With checkpointing: the layer inputs live in host memory (the Transformer
  // copies each out before its layer runs and back before its recompute); the
  // plan holds the two a layer's forward pass reads and writes.
  bool offload_inputs = false;
  size_t chunk_bytes = kChunkBytes;  // the budget of a chunk's widest tensor
  int tp = 1;  // tensor-parallel ranks
  // The output head's weight is trained: its chunks hold at least
  // kTrainedHeadChunkRows rows (or all).
  bool head_weight_gradient = false;
  // Each row of logits padded to whole 16 bytes (ops::padded_row_length): on
  // a GPU, where rows that start unaligned (GPT-2's 50257 classes in bf16) put
  // the head's products on cuBLASLt's slow kernels.
  bool padded_logit_rows = false;
};

// Whether plans pad the rows of logits on `device` (padded_logit_rows): on GPUs
// alone; the CPU's GEMM takes packed rows at full speed.
inline bool pads_logit_rows(Device device) { return device.is_cuda(); }

// The rows of one chunk of the output head's logits, and of the MLP's working
// set (Activations::mlp_rows), in plan_activations' plan: all of them when they
// fit chunk_bytes, else the largest multiple of 64 rows that fits (at least 64;
// for a trained head, at least kTrainedHeadChunkRows).
int64_t logits_chunk_rows(const ModelConfig& config, DType dtype, int64_t batch, int64_t seq,
                          const ActivationOptions& options);
int64_t mlp_chunk_rows(const ModelConfig& config, DType dtype, int64_t batch, int64_t seq,
                       const ActivationOptions& options);

// Lays out the activations in `arena` (see Arena for the two-pass use).
Activations plan_activations(const ModelConfig& config, DType dtype, int64_t batch, int64_t seq, Arena& arena,
                             const ActivationOptions& options = {});

// Bytes of the arena plan_activations needs on `device`.
size_t activation_bytes(const ModelConfig& config, DType dtype, int64_t batch, int64_t seq,
                        const ActivationOptions& options = {}, Device device = Device::cpu());

}  // namespace hone
