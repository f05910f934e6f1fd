#include "hone/model/activations.hpp"

namespace hone {

Activations plan_activations(const ModelConfig& c, DType dtype, int64_t batch, int64_t seq, Arena& arena,
                             bool checkpointing) {
  const DType stats = dtype == DType::f64 ? DType::f64 : DType::f32;
  const bool layernorm = c.norm == NormKind::layernorm;
  const Shape hidden{batch, seq, c.dim};
  const Shape rows{batch * seq};
  auto norm_stats = [&](Tensor& mean, Tensor& rstd) {
    if (layernorm) mean = arena.take(rows, stats);
    rstd = arena.take(rows, stats);
  };

  Activations a;
  a.batch = batch;
  a.seq = seq;
  a.layers.resize(size_t(c.n_layers));
  for (LayerActivations& l : a.layers) {
    l.input = arena.take(hidden, dtype);
    if (checkpointing && &l != &a.layers.front()) {
      const Tensor input = l.input;
      l = a.layers.front();  // the shared working set
      l.input = input;
      continue;
    }
    l.attn_norm = arena.take(hidden, dtype);
    norm_stats(l.attn_norm_mean, l.attn_norm_rstd);
    l.qkv = arena.take({batch, seq, c.qkv_dim()}, dtype);
    l.attn = arena.take({batch, seq, c.n_heads * c.head_dim()}, dtype);
    l.attn_lse = arena.take({batch, c.n_heads, seq}, stats);
    l.mid = arena.take(hidden, dtype);
    l.mlp_norm = arena.take(hidden, dtype);
    norm_stats(l.mlp_norm_mean, l.mlp_norm_rstd);
    l.mlp_up = arena.take({batch, seq, c.mlp_up_dim()}, dtype);
    l.mlp_act = arena.take({batch, seq, c.ffn_dim}, dtype);
  }
  a.output = arena.take(hidden, dtype);
  a.final_norm = arena.take(hidden, dtype);
  norm_stats(a.final_norm_mean, a.final_norm_rstd);
  a.logits = arena.take({batch * seq, c.vocab_size}, dtype);
  a.token_losses = arena.take(rows, stats);
  a.logits_lse = arena.take(rows, stats);

  a.branch = arena.take(hidden, dtype);
  a.d_residual = arena.take(hidden, dtype);
  a.d_norm = arena.take(hidden, dtype);
  a.d_attn = arena.take({batch, seq, c.n_heads * c.head_dim()}, dtype);
  a.d_qkv = arena.take({batch, seq, c.qkv_dim()}, dtype);
  a.d_mlp_act = arena.take({batch, seq, c.ffn_dim}, dtype);
  a.d_mlp_up = arena.take({batch, seq, c.mlp_up_dim()}, dtype);
  return a;
}

size_t activation_bytes(const ModelConfig& config, DType dtype, int64_t batch, int64_t seq, bool checkpointing) {
  Arena measure;
  plan_activations(config, dtype, batch, seq, measure, checkpointing);
  return measure.bytes_used();
}

}  // namespace hone
