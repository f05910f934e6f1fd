#pragma once
// The op API that models call. Each op checks its tensors (shapes, dtypes, one
// device) and dispatches to the kernels of that device and dtype. Activations
// are f32, bf16 or f64 ("T"); parameters, their gradients and statistics are
// kept in the compute type (f32, or f64 for f64 activations). Parameters that
// are read only (a frozen model kept in its compute dtype: LoRA's base in bf16)
// may also be T.
//
// Conventions: "_backward" ops that produce gradients of parameters or of the
// residual stream *accumulate* (+=) into them; all other outputs are overwritten.
// An absent optional tensor is a default-constructed Tensor{}.
#include <cstdint>
#include <memory>
#include <span>

#include "hone/core/tensor.hpp"
#include "hone/kernels/cpu/activation.hpp"
#include "hone/kernels/cpu/adamw.hpp"

namespace hone::ops {

// ---- GEMM ----
// c = alpha·op(a)·op(b) + beta·c over the last two dimensions; leading
// dimensions are a batch (same in a, b, c).
void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, float alpha = 1.0f,
            float beta = 0.0f);
// Device memory the GEMM library keeps from the first product on, counted by
// the device's allocator: cuBLASLt's workspace on CUDA, none on the CPU.
size_t gemm_workspace_bytes(Device device);

// Padded rows: a row of `columns` elements of `dtype` stretched to whole
// 16-byte groups, so that every row of a matrix starts 16-byte aligned where
// the first does (the GPU's products and loads need it to run at full speed).
int64_t padded_row_length(int64_t columns, DType dtype);

// y[..., out] = x[..., in] · weight[out, in]ᵀ (+ bias[out]). Without a bias y
// may be [rows, padded_row_length(out)] (the output head's logits on the GPU):
// its padding is not written.
void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y);
// dx = dy·weight (dx += ... when accumulate_dx), d_weight += dyᵀ·x (= when not
// accumulate_dw), d_bias += Σ dy. dx may be absent (frozen input), d_bias too
// (no bias); without d_bias dy's rows may be padded as y's in linear_forward
// (the padding is not read).
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dx,
                     const Tensor& d_weight, const Tensor& d_bias, bool accumulate_dx = false,
                     bool accumulate_dw = true);

// Packed sequences (several samples in one row) pass token_positions: i32
// [batch, seq], each token's position within its own sample (0 where a sample
// starts). It moves learned and rotary positions, and attention sees only keys of
// the query's own sample. Absent, a row is one sequence at positions 0..seq-1.
//
// Every op checks plain position tensors (each in [0, t]) before using them,
// which on a GPU means reading them back: a synchronization per op. Positions
// checked once, by TokenPositions::checked, are taken as they are.
class TokenPositions {
 public:
  TokenPositions() = default;
  TokenPositions(Tensor unchecked) : tensor_(std::move(unchecked)) {}  // NOLINT(google-explicit-constructor)
  // The positions, checked (hone::Error naming the first bad one), on `device`.
  static TokenPositions checked(const Tensor& positions, Device device);

  const Tensor& tensor() const { return tensor_; }
  bool is_checked() const { return checked_; }

 private:
  Tensor tensor_;
  bool checked_ = false;
};

// Tensor parallelism can split the vocabulary (Megatron's vocab-parallel
// embedding and cross-entropy): a table, or the logits' columns, then hold the
// classes [first, first + their rows or columns) of a vocabulary of `classes`.
// The default is the whole vocabulary.
struct VocabPart {
  int64_t first = 0;
  int64_t classes = 0;  // the whole vocabulary, for checking ids; 0: what the table or logits hold
  // The logits' columns that hold classes; 0: all. Fewer: each row is padded
  // (to padded_row_length(columns)); the loss does not read the padding.
  int64_t columns = 0;
};

// ---- embedding ----
// out[b, t] = table[tokens[b, t]] (+ positions[t], or positions[token_positions[b, t]]);
// tokens are i32 [batch, seq]. A part of the table gives zero rows for the ids
// it does not hold (and adds the positions all the same), and its backward pass
// adds only to the rows it holds.
void embedding_forward(const Tensor& tokens, const Tensor& table, const Tensor& positions, const Tensor& out,
                       const TokenPositions& token_positions = {}, VocabPart part = {});
void embedding_backward(const Tensor& tokens, const Tensor& d_out, const Tensor& d_table, const Tensor& d_positions,
                        const TokenPositions& token_positions = {}, VocabPart part = {});

// ---- normalization over the last dimension ----
// In the backward ops an absent d_weight (and d_bias) means a frozen norm.
//
// A forward op can also do the residual add before it: given a branch, it
// normalizes x + branch and writes that sum to `sum` (which may be x itself),
// the tensor the backward op then reads as its x. The sum is rounded to x's
// dtype before it is normalized, so the result is exactly that of ops::add
// followed by the norm, with one read of the sum fewer.
struct ResidualAdd {
  Tensor branch, sum;  // both, or neither (no add)
};
void rmsnorm_forward(const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd, double eps,
                     const ResidualAdd& residual = {});
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dx,
                      const Tensor& d_weight);
void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, double eps, const ResidualAdd& residual = {});
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& d_weight, const Tensor& d_bias);

// ---- rotary embedding ----
// Rotates the first `heads` heads of each row of x [batch, seq, row] in place;
// cos/sin are [positions, head_dim/2]; inverse = true is the backward pass.
void rope_apply(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t heads, int64_t head_dim,
                int64_t position_offset, bool inverse, const TokenPositions& token_positions = {});

// ---- causal attention over a fused qkv [batch, seq, (H + 2·KV)·head_dim] ----
struct AttentionHeads {
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  double scale = 0;  // 0 means 1/sqrt(head_dim)
};
// Device memory cuDNN's attention backward pass allocates for a call of this
// shape besides its tensors and its engine's workspace (CUDA, bf16: dQ's f32
// sums); 0 where cuDNN would not take the call. hone's own kernels need 4
// bytes per query and head, left out.
size_t attention_scratch_bytes(Device device, DType dtype, const AttentionHeads& heads, int64_t batch,
                               int64_t seq);
// out [batch, seq, H·head_dim]; lse [batch, H, seq]; alibi_slopes [H] or absent.
void attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& alibi_slopes,
                       const AttentionHeads& heads, const TokenPositions& token_positions = {});
void attention_backward(const Tensor& d_out, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        const Tensor& alibi_slopes, const Tensor& d_qkv, const AttentionHeads& heads,
                        const TokenPositions& token_positions = {});

// A decoding step's rows: row i is the next token of cache slot slots[i], at
// position positions[i]. Checked once against caches of cache_slots × capacity
// positions and copied to `device` once (on a GPU one synchronizing upload, not
// one per op and layer), for every layer's kv_cache_append and attention_decode.
class DecodeRows {
 public:
  DecodeRows(std::span<const int64_t> slots, std::span<const int64_t> positions, int64_t cache_slots,
             int64_t capacity, Device device);

  int64_t count() const { return count_; }
  int64_t cache_slots() const { return cache_slots_; }
  int64_t capacity() const { return capacity_; }
  int64_t max_position() const { return max_position_; }
  Device device() const { return indices_.device(); }
  // i32 [count] on the device.
  const int32_t* positions() const { return indices_.data<int32_t>(); }
  const int32_t* slots() const { return positions() + count_; }
  // The positions as i32 [count, 1] ids (a learned position table's rows).
  Tensor position_ids() const { return indices_.slice(0, {count_, 1}); }

 private:
  Tensor indices_;  // [2, count]: the positions, then the slots
  int64_t count_ = 0, cache_slots_ = 0, capacity_ = 0, max_position_ = 0;
};

// Decoding, before attention_decode: row i of qkv ([rows, (H + 2·KV)·head_dim])
// rotates its query and key heads to its position where cos and sin
// (rope_apply's tables) are given, then writes its key and value into the
// caches [cache slots, capacity, KV·head_dim].
void kv_cache_append(const Tensor& qkv, const Tensor& cos, const Tensor& sin, const DecodeRows& rows,
                     const Tensor& k_cache, const Tensor& v_cache, const AttentionHeads& heads);
// Row i of q ([rows, ...]; heads at the start of each row, e.g. a fused qkv row)
// attends to positions [0, its position] of its cache slot; out [rows, H·head_dim].
void attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const DecodeRows& rows,
                      const Tensor& alibi_slopes, const Tensor& out, const AttentionHeads& heads);

// ---- activations (outputs overwritten) ----
// gate_up [..., 2·hidden] -> out [..., hidden]. The backward passes may write
// the input's gradient over the input (d_gate_up = gate_up, dx = x): the model's
// backward pass needs no other copy of the MLP's widest tensor.
void swiglu_forward(const Tensor& gate_up, const Tensor& out);
void swiglu_backward(const Tensor& d_out, const Tensor& gate_up, const Tensor& d_gate_up);
using kernels::cpu::GeluApproximation;
void gelu_forward(const Tensor& x, const Tensor& y, GeluApproximation approximation);
void gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& dx, GeluApproximation approximation);
// A GELU MLP's up projection and activation: pre = x·weightᵀ (+ bias), y =
// gelu(pre); and, for the down projection that reads y, the gradient through
// both: d_pre = (dy·weight) ⊙ gelu'(pre). On CUDA the tanh GELU in bf16 runs
// in cuBLASLt's epilogue (no second kernel reads the products' outputs back);
// elsewhere these are linear_forward + gelu_forward and the down projection's
// input gradient + gelu_backward.
void linear_gelu_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& pre,
                         const Tensor& y, GeluApproximation approximation);
void linear_gelu_input_backward(const Tensor& dy, const Tensor& weight, const Tensor& pre, const Tensor& d_pre,
                                GeluApproximation approximation);

// ---- loss ----
inline constexpr int32_t kIgnoreIndex = -100;  // PyTorch's default ignore_index
struct LossSum {
  double sum = 0;      // Σ of per-token losses over unmasked targets
  int64_t tokens = 0;  // unmasked targets
  double mean() const { return tokens ? sum / double(tokens) : 0.0; }
};
// logits [rows, vocab], targets i32 [rows]; losses and lse [rows] (compute type).
// Throws hone::Error naming the row when a target is outside the vocabulary.
// Logits of a part of the vocabulary give the part's logsumexp in lse and
// losses[row] = lse[row] - (the target's logit where the part holds the target,
// else 0), from which the parts' whole loss follows (Transformer does that).
LossSum cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& lse,
                              VocabPart part = {});
// Turns logits, in place, into the gradient of scale·Σ losses (padding: 0);
// with a part, lse must be the whole vocabulary's logsumexp. With row_weights ([rows], lse's
// dtype) the gradient of scale·Σ row_weights[r]·losses[r] (DPO weighs each
// sequence's tokens by its pair's loss gradient).
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, double scale,
                            VocabPart part = {}, const Tensor& row_weights = {});
// Both at once over the whole vocabulary, for training when the loss scale is
// known before the forward pass: the losses and lse of cross_entropy_forward,
// and the logits turned into the gradient of scale·Σ losses. On the CPU each
// row's gradient is written while the row is still in cache. The part may
// only say how many columns hold classes (padded rows).
LossSum cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                                       const Tensor& lse, double scale, VocabPart part = {});

// ---- dropout ----
// out = x · keep / (1 - p), keep = 1 with probability 1 - p, drawn from Philox at
// (seed, stream, element): calling it again with the same arguments applies the
// same mask, so a backward pass recomputes it instead of storing it. out may be x.
// x may be a part of a whole, from its element `first` on: it gets that part of
// the whole's mask.
void dropout(const Tensor& x, const Tensor& out, double p, uint64_t seed, uint64_t stream, int64_t first = 0);

// ---- element-wise ----
void add(const Tensor& a, const Tensor& b, const Tensor& out);
void add_(const Tensor& x, const Tensor& y);  // x += y
void scale_(const Tensor& x, double factor);
void cast(const Tensor& src, const Tensor& dst);  // f32 <-> bf16, f16 or f64
// Converts dst.numel() elements of src_dtype at host memory `src` (a memory-mapped
// file, say) into dst, with the conversions of cast() above.
void cast(const void* src, DType src_dtype, const Tensor& dst);
// src itself when it already is `dtype`, else a converted copy on src's device.
Tensor cast_to(const Tensor& src, DType dtype);
double sum_squares(const Tensor& x);
// Column blocks of [rows, width] matrices (LoRA adapters own a block of a
// projection's outputs): dst[:, col:col+c] += scale·src, and dst = scale·src[:, col:col+c].
void add_columns(const Tensor& dst, int64_t col, const Tensor& src, double scale);
void copy_columns(const Tensor& src, int64_t col, const Tensor& dst, double scale);

// ---- DoRA (weight-decomposed LoRA; kernels/cpu/dora.hpp) ----
// For a weight block W [rows, in] (f32, bf16; f64 on the gradient-check path),
// its adapter A [rank, in] and B [rows, rank] with scale s, and the magnitudes
// m [rows] (A, B and m in W's compute type: f32, f64 for f64): the norm
// n_i = ‖W_i + s·(B·A)_i‖ in that type (into `norms` where it is defined),
// inv_norm = 1/n_i and scale = m_i / n_i per row, without forming W + s·B·A.
// Magnitudes set to these norms give scales of exactly 1.
void dora_norms(const Tensor& weight, const Tensor& a, const Tensor& b, double lora_scale, const Tensor& magnitude,
                const Tensor& scale, const Tensor& inv_norm, const Tensor& norms = Tensor());
// x[i, :] *= factor[i] for x [rows, cols] (f32 or f64, factor the same).
void scale_rows(const Tensor& x, const Tensor& factor);
// The adapted columns y[:, col:col+c] of a projection's output [rows, width],
// with the layer's bias (undefined: none): z = y_block − bias_block, kept for
// backward ([rows, c], y's dtype), and y_block = scale ⊙ z + bias_block. scale
// is in the compute type of y's dtype (f32; f64 for f64).
void dora_scale_forward(const Tensor& y, int64_t col, const Tensor& scale, const Tensor& bias, const Tensor& z);
// Its backward, in place on dy [rows, width]: d_magnitude += Σ_rows dy_block ⊙ z
// ⊙ inv_norm (the norm held constant), then dy_block *= scale, the gradient
// of z for the projection's and the adapter's backward.
void dora_scale_backward(const Tensor& dy, int64_t col, const Tensor& z, const Tensor& scale, const Tensor& inv_norm,
                         const Tensor& d_magnitude);

// ---- device ----
// Returns once the work queued on `device` has finished: CPU ops are done when
// they return, CUDA ops queue kernels on the device's stream. For timing (a
// host clock read after it covers the work before it).
void synchronize(Device device);
// Makes `device` the one this process computes on, before anything is made on
// it: a CUDA process uses one GPU (cuda:N for N > 0 needs this; the default is
// cuda:0). Nothing for the CPU.
void use_device(Device device);

// Copies between a device's tensors and host tensors that overlap the device's
// compute (activation offloading). On CUDA they run on a stream of their own,
// from and to page-locked host memory; on the CPU they are plain copies, done
// when start() returns. Each copy belongs to a slot. A copy starts after the
// compute queued before it; compute queued after wait(slot) sees the slot's last
// copy finished. So: wait for a slot before writing over the device tensor its
// last copy read, or before reading the one it wrote. Destroying the object
// waits for its copies.
class OverlappedCopies {
 public:
  // `host`: the host tensor every copy reads or writes a part of (pinned here).
  OverlappedCopies(Device device, const Tensor& host, int slots);
  ~OverlappedCopies();
  OverlappedCopies(const OverlappedCopies&) = delete;
  OverlappedCopies& operator=(const OverlappedCopies&) = delete;

  void start(const Tensor& dst, const Tensor& src, int slot);
  void wait(int slot);
  const Tensor& host() const { return host_; }

 private:
  struct CopyStream;  // a CUDA device's (copies.cpp)
  Tensor host_;
  std::unique_ptr<CopyStream> stream_;  // null on the CPU
};

// ---- optimizer ----
using kernels::cpu::AdamWHyper;
// One AdamW step on a contiguous parameter span; compute_copy (bf16) absent or
// receives the updated weights for the next forward pass.
void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWHyper& hyper, const Tensor& compute_copy);

}  // namespace hone::ops
