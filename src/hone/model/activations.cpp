#include "hone/model/activations.hpp"

#include <algorithm>
#include <array>

#include "hone/core/error.hpp"
#include "hone/ops/ops.hpp"

namespace hone {

namespace {

// Rows done at a time of `rows` rows whose widest tensor takes `row_bytes` a row.
int64_t chunk_rows(int64_t rows, size_t row_bytes, size_t chunk_bytes, int64_t at_least = 64) {
  if (size_t(rows) <= chunk_bytes / row_bytes) return rows;
  const int64_t fitting = int64_t(chunk_bytes / row_bytes) / 64 * 64;
  return std::min(rows, std::max(fitting, at_least));
}

// A row of logits: this rank's classes, maybe padded.
int64_t logit_row_length(const ModelConfig& c, DType dtype, const ActivationOptions& options) {
  const int64_t classes = c.splits_vocabulary(options.tp) ? c.vocab_size / options.tp : c.vocab_size;
  return options.padded_logit_rows ? ops::padded_row_length(classes, dtype) : classes;
}

}  // namespace

int64_t logits_chunk_rows(const ModelConfig& c, DType dtype, int64_t batch, int64_t seq,
                          const ActivationOptions& options) {
  const int64_t rows = c.splits_vocabulary(options.tp) ? batch * seq : batch * seq / options.tp;
  return chunk_rows(rows, size_t(logit_row_length(c, dtype, options)) * dtype_size(dtype), options.chunk_bytes,
                    options.head_weight_gradient ? kTrainedHeadChunkRows : 64);
}

int64_t mlp_chunk_rows(const ModelConfig& c, DType dtype, int64_t batch, int64_t seq,
                       const ActivationOptions& options) {
  // Checkpointing recomputes the MLP in the backward pass anyway: its working
  // set can hold a chunk of rows at a time (tp gathers and scatters whole rows).
  if (!options.checkpointing || options.tp > 1) return batch * seq / options.tp;
  return chunk_rows(batch * seq, size_t(c.mlp_up_dim()) * dtype_size(dtype), options.chunk_bytes);
}

Activations plan_activations(const ModelConfig& c, DType dtype, int64_t batch, int64_t seq, Arena& arena,
                             const ActivationOptions& options) {
  const int tp = options.tp;
  const bool checkpointing = options.checkpointing;
  HONE_CHECK(!options.offload_inputs || checkpointing,
             "activation offloading keeps the checkpointed layer inputs in host memory: it needs activation "
             "checkpointing");
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
  auto norm_stats = [&](Tensor& mean, Tensor& rstd, const Shape& stat_rows) {
    if (layernorm) mean = arena.take(stat_rows, stats);
    rstd = arena.take(stat_rows, stats);
  };
  const int64_t mlp_rows = mlp_chunk_rows(c, dtype, batch, seq, options);
  const bool mlp_chunked = mlp_rows < batch * seq / tp;
  auto mlp_shape = [&](int64_t width) { return mlp_chunked ? Shape{mlp_rows, width} : Shape{batch, seq, width}; };

  Activations a;
  auto attention_gradients = [&] {
    a.d_attn = arena.take({batch, seq, heads * c.head_dim()}, dtype);
    a.d_qkv = arena.take({batch, seq, qkv}, dtype);
  };
  a.batch = batch;
  a.seq = seq;
  a.mlp_rows = mlp_rows;
  a.layers.resize(size_t(c.n_layers));
  // Under tp a norm's row output only feeds the gather into its `_all`
  // tensor (backward reads the norm's input): one scratch serves every norm.
  const Tensor norm_rows = tp == 1 ? Tensor() : arena.take(hidden, dtype);
  auto norm_output = [&] { return tp == 1 ? arena.take(hidden, dtype) : norm_rows; };
  // Offloaded inputs: layer i reads buffer i % 2 and writes the other.
  std::array<Tensor, 2> on_device;
  if (options.offload_inputs) on_device = {arena.take(hidden, dtype), arena.take(hidden, dtype)};
  for (LayerActivations& l : a.layers) {
    const size_t i = size_t(&l - a.layers.data());
    l.input = options.offload_inputs ? on_device[i % 2] : arena.take(hidden, dtype);
  }
  // Each layer's working set, or under checkpointing one they share; its MLP
  // part is taken last (see below).
  size_t mlp_working_set = 0;
  for (LayerActivations& l : a.layers) {
    if (checkpointing && &l != &a.layers.front()) {
      const Tensor input = l.input;
      l = a.layers.front();  // the shared working set
      l.input = input;
      continue;
    }
    l.attn_norm = norm_output();
    l.attn_norm_all = all(l.attn_norm);
    norm_stats(l.attn_norm_mean, l.attn_norm_rstd, rows);
    l.qkv = arena.take({batch, seq, qkv}, dtype);
    l.attn = arena.take({batch, seq, heads * c.head_dim()}, dtype);
    l.attn_lse = arena.take({batch, heads, seq}, stats);
    l.mid = arena.take(hidden, dtype);
    mlp_working_set = arena.mark();
    l.mlp_norm = mlp_chunked ? arena.take(mlp_shape(c.dim), dtype) : norm_output();
    l.mlp_norm_all = all(l.mlp_norm);
    norm_stats(l.mlp_norm_mean, l.mlp_norm_rstd, Shape{mlp_rows});
    l.mlp_up = arena.take(mlp_shape(up), dtype);
    l.mlp_act = arena.take(mlp_shape(ffn), dtype);
  }
  const bool split_vocabulary = c.splits_vocabulary(tp);
  auto head_input_and_logits = [&] {
    a.final_norm = arena.take(hidden, dtype);
    a.final_norm_all = split_vocabulary ? arena.take(all_rows, dtype) : a.final_norm;
    a.logits = arena.take({logits_chunk_rows(c, dtype, batch, seq, options), logit_row_length(c, dtype, options)},
                          dtype);
  };
  if (checkpointing) {
    // Three sets of tensors that are never live at once share the memory of
    // the MLP's working set, which is live within a layer's MLP block: the
    // attention block's gradients (its backward runs between the MLP's and the
    // next layer's recompute) and the head's input and logits (live from the
    // last layer's forward to the start of the first layer's backward).
    arena.reuse_from(mlp_working_set);
    attention_gradients();
    arena.reuse_from(mlp_working_set);
    head_input_and_logits();
    arena.reuse_end();
  } else {
    head_input_and_logits();
  }
  a.output = arena.take(hidden, dtype);
  norm_stats(a.final_norm_mean, a.final_norm_rstd, rows);
  const Shape loss_rows = split_vocabulary ? Shape{batch * seq} : rows;
  a.token_losses = arena.take(loss_rows, stats);
  a.logits_lse = arena.take(loss_rows, stats);

  a.branch = arena.take(hidden, dtype);
  a.branch_all = all(a.branch);
  a.d_residual = arena.take(hidden, dtype);
  a.d_residual_all = all(a.d_residual);
  a.d_norm = arena.take(hidden, dtype);
  a.d_norm_all = all(a.d_norm);
  if (!checkpointing) attention_gradients();
  a.d_mlp_act = arena.take(mlp_shape(ffn), dtype);
  return a;
}

size_t activation_bytes(const ModelConfig& config, DType dtype, int64_t batch, int64_t seq,
                        const ActivationOptions& options, Device device) {
  Arena measure(device);
  plan_activations(config, dtype, batch, seq, measure, options);
  return measure.bytes_used();
}

}  // namespace hone
