#include "hone/model/activations.hpp"

#include <algorithm>

#include "hone/core/error.hpp"

namespace hone {

int64_t logits_chunk_rows(int64_t rows, int64_t classes, DType dtype, size_t chunk_bytes) {
  const size_t row_bytes = size_t(classes) * dtype_size(dtype);
  if (size_t(rows) <= chunk_bytes / row_bytes) return rows;
  const int64_t fitting = int64_t(chunk_bytes / row_bytes) / 64 * 64;
  return std::min(rows, std::max<int64_t>(fitting, 64));
}

Activations plan_activations(const ModelConfig& c, DType dtype, int64_t batch, int64_t seq, Arena& arena,
                             const ActivationOptions& options) {
  const int tp = options.tp;
  const bool checkpointing = options.checkpointing;
  HONE_CHECK(batch * seq % tp == 0, "tensor parallelism over {} ranks needs batch x seq ({} x {}) to be a multiple of {}",
             tp, batch, seq, tp);
  const DType stats = dtype == DType::f64 ? DType::f64 : DType::f32;
  const bool layernorm = c.norm == NormKind::layernorm;
  const Shape all_rows{batch, seq, c.dim};
  const Shape hidden = tp == 1 ? all_rows : Shape{batch * seq / tp, c.dim};
  const Shape rows{batch * seq / tp};
  const int64_t heads = c.n_heads / tp, qkv = c.qkv_dim() / tp, ffn = c.ffn_dim / tp, up = c.mlp_up_dim() / tp;
  // An `_all` tensor: all rows under tp, else the row tensor itself.
  auto all = [&](const Tensor& own) { return tp == 1 ? own : arena.take(all_rows, dtype); };
  auto norm_stats = [&](Tensor& mean, Tensor& rstd) {
    if (layernorm) mean = arena.take(rows, stats);
    rstd = arena.take(rows, stats);
  };

  Activations a;
  a.batch = batch;
  a.seq = seq;
  a.layers.resize(size_t(c.n_layers));
  // Under tp a norm's row output only feeds the gather into its `_all`
  // tensor (backward reads the norm's input): one scratch serves every norm.
  const Tensor norm_rows = tp == 1 ? Tensor() : arena.take(hidden, dtype);
  auto norm_output = [&] { return tp == 1 ? arena.take(hidden, dtype) : norm_rows; };
  for (LayerActivations& l : a.layers) {
    l.input = arena.take(hidden, dtype);
    if (checkpointing && &l != &a.layers.front()) {
      const Tensor input = l.input;
      l = a.layers.front();  // the shared working set
      l.input = input;
      continue;
    }
    l.attn_norm = norm_output();
    l.attn_norm_all = all(l.attn_norm);
    norm_stats(l.attn_norm_mean, l.attn_norm_rstd);
    l.qkv = arena.take({batch, seq, qkv}, dtype);
    l.attn = arena.take({batch, seq, heads * c.head_dim()}, dtype);
    l.attn_lse = arena.take({batch, heads, seq}, stats);
    l.mid = arena.take(hidden, dtype);
    l.mlp_norm = norm_output();
    l.mlp_norm_all = all(l.mlp_norm);
    norm_stats(l.mlp_norm_mean, l.mlp_norm_rstd);
    l.mlp_up = arena.take({batch, seq, up}, dtype);
    l.mlp_act = arena.take({batch, seq, ffn}, dtype);
  }
  a.output = arena.take(hidden, dtype);
  a.final_norm = arena.take(hidden, dtype);
  norm_stats(a.final_norm_mean, a.final_norm_rstd);
  const bool split_vocabulary = c.splits_vocabulary(tp);
  a.final_norm_all = split_vocabulary ? arena.take(all_rows, dtype) : a.final_norm;
  const Shape loss_rows = split_vocabulary ? Shape{batch * seq} : rows;
  const int64_t classes = split_vocabulary ? c.vocab_size / tp : c.vocab_size;
  a.logits = arena.take({logits_chunk_rows(loss_rows[0], classes, dtype, options.logits_chunk_bytes), classes}, dtype);
  a.token_losses = arena.take(loss_rows, stats);
  a.logits_lse = arena.take(loss_rows, stats);

  a.branch = arena.take(hidden, dtype);
  a.branch_all = all(a.branch);
  a.d_residual = arena.take(hidden, dtype);
  a.d_residual_all = all(a.d_residual);
  a.d_norm = arena.take(hidden, dtype);
  a.d_norm_all = all(a.d_norm);
  a.d_attn = arena.take({batch, seq, heads * c.head_dim()}, dtype);
  a.d_qkv = arena.take({batch, seq, qkv}, dtype);
  a.d_mlp_act = arena.take({batch, seq, ffn}, dtype);
  return a;
}

size_t activation_bytes(const ModelConfig& config, DType dtype, int64_t batch, int64_t seq,
                        const ActivationOptions& options) {
  Arena measure;
  plan_activations(config, dtype, batch, seq, measure, options);
  return measure.bytes_used();
}

}  // namespace hone
