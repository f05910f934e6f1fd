#include "hone/model/transformer.hpp"

#include <algorithm>
#include <cmath>

#include "hone/core/rng.hpp"
#include "hone/model/positional.hpp"

namespace hone {

namespace {

// A host vector of doubles as a tensor of `dtype` (f32 or f64) on `device`.
Tensor to_tensor(const std::vector<double>& values, const Shape& shape, DType dtype, Device device) {
  return ops::cast_to(Tensor::from(values, shape), dtype).to(device);
}

// `memory` itself when it holds at least `elements`, else new memory of that
// many (the old freed first, so that the two are never held at once).
const Tensor& hold_at_least(Tensor& memory, int64_t elements, DType dtype, Device device) {
  if (!memory.defined() || memory.numel() < elements) {
    memory = Tensor();
    memory = Tensor::empty({elements}, dtype, device);
  }
  return memory;
}

// `t` as [rows, cols] (a last chunk of rows may be shorter), the old freed first.
void resize_rows(Tensor& t, int64_t rows, int64_t cols, DType dtype, Device device) {
  if (t.defined() && t.size(0) == rows) return;
  t = Tensor();
  t = Tensor::empty({rows, cols}, dtype, device);
}

}  // namespace

Transformer::Transformer(ModelConfig config, DType dtype, Device device, std::optional<LoraConfig> lora,
                         ModelPlacement placement, BaseWeights base)
    : config_(std::move(config)),
      dtype_(dtype),
      device_(device),
      lora_(std::move(lora)),
      base_frozen_(lora_.has_value() || base == BaseWeights::frozen) {
  config_.validate();
  HONE_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f64,
             "models compute in fp32, bf16 or fp64, not {}", dtype_name(dtype));
  plan_options_.head_weight_gradient = !base_frozen_;
  plan_options_.padded_logit_rows = pads_logit_rows(device);
  if (placement.tensor_parallel && placement.tensor_parallel->size() > 1) {
    tp_ = placement.tensor_parallel;
    tp_size_ = tp_->size();
    tp_rank_ = tp_->rank();
    config_.check_tensor_parallel(tp_size_);
    split_vocabulary_ = config_.splits_vocabulary(tp_size_);
  }
  declare_parameters();
  layer_adapters_.resize(layers_.size());  // empty without LoRA
  const DType master = dtype == DType::f64 ? DType::f64 : DType::f32;
  const int64_t pad = base_frozen_ ? 1 : placement.pad_multiple;
  // A frozen base is never updated, so it needs no fp32 master: it is kept in
  // the compute dtype alone (2 bytes a parameter in bf16 instead of 4 + 2).
  params_.allocate(base_frozen_ ? dtype : master, dtype, device, /*with_grads=*/!base_frozen_, pad, placement.shard);
  if (lora_) {
    // DoRA's row norms need whole rows and its magnitudes whole weights: no split or sharded base.
    HONE_CHECK(!lora_->use_dora || (tp_size_ == 1 && placement.shard.world <= 1),
               "use_dora: DoRA runs on one rank or with data parallelism (ZeRO 0 to 2), not with tensor "
               "parallelism or ZeRO-3 (its row norms need whole weights)");
    declare_lora();
    lora_params_.allocate(master, dtype, device, true, placement.pad_multiple, placement.shard);
  }
  if (config_.position == PositionKind::alibi) {
    const int64_t heads = config_.n_heads / tp_size_;
    std::vector<double> slopes = alibi_slopes(config_.n_heads, config_.alibi_bias_max);
    slopes = std::vector(slopes.begin() + tp_rank_ * heads, slopes.begin() + (tp_rank_ + 1) * heads);
    alibi_slopes_ = to_tensor(slopes, {heads}, master, device);
  }
}

void Transformer::declare_parameters() {
  const ModelConfig& c = config_;
  const bool layernorm_bias = c.norm == NormKind::layernorm && c.norm_bias;
  int unit = kEmbeddingUnit;
  auto norm = [&](const std::string& prefix, Parameter*& weight, Parameter*& bias) {
    weight = &params_.declare(prefix + ".weight", {c.dim}, false, unit);
    if (layernorm_bias) bias = &params_.declare(prefix + ".bias", {c.dim}, false, unit);
  };
  // Tensor parallelism: a column-parallel projection's output features (and
  // bias) are split over the ranks, segment by segment; a row-parallel one's
  // input features (its bias is whole on every rank).
  enum Parallel { kColumn, kRow };
  auto linear = [&](const std::string& prefix, int64_t out, int64_t in, Parameter*& weight, Parameter*& bias,
                    Parallel parallel, std::vector<int64_t> segments = {}) {
    TensorSplit split;
    if (tp_size_ > 1) split = {.dim = parallel == kColumn ? 0 : 1, .parts = tp_size_, .index = tp_rank_,
                               .segments = std::move(segments)};
    weight = &params_.declare(prefix + ".weight", {out, in}, true, unit, split);
    weight->compute_only = true;  // only GEMMs read projection weights
    if (c.linear_bias) {
      bias = &params_.declare(prefix + ".bias", {out}, false, unit, parallel == kColumn ? split : TensorSplit{});
    }
  };

  // A split vocabulary: each rank holds vocab/tp rows of the token embeddings
  // and of the output projection.
  const TensorSplit vocabulary =
      split_vocabulary_ ? TensorSplit{.dim = 0, .parts = tp_size_, .index = tp_rank_} : TensorSplit{};
  tok_embeddings_ = &params_.declare("tok_embeddings.weight", {c.vocab_size, c.dim}, true, unit, vocabulary);
  if (c.position == PositionKind::learned) {
    pos_embeddings_ = &params_.declare("pos_embeddings.weight", {c.max_seq_len, c.dim}, true, unit);
  }
  layers_.resize(size_t(c.n_layers));
  for (int64_t i = 0; i < c.n_layers; ++i) {
    LayerParameters& l = layers_[size_t(i)];
    const std::string prefix = "layers." + std::to_string(i);
    unit = layer_unit(i);
    norm(prefix + ".attn_norm", l.attn_norm_weight, l.attn_norm_bias);
    const int64_t hd = c.head_dim();
    linear(prefix + ".attn.qkv", c.qkv_dim(), c.dim, l.qkv_weight, l.qkv_bias, kColumn,
           {c.n_heads * hd, c.n_kv_heads * hd, c.n_kv_heads * hd});
    linear(prefix + ".attn.out", c.dim, c.n_heads * hd, l.out_weight, l.out_bias, kRow);
    norm(prefix + ".mlp_norm", l.mlp_norm_weight, l.mlp_norm_bias);
    linear(prefix + ".mlp.up", c.mlp_up_dim(), c.dim, l.up_weight, l.up_bias, kColumn,
           c.mlp == MlpKind::swiglu ? std::vector{c.ffn_dim, c.ffn_dim} : std::vector<int64_t>{});
    linear(prefix + ".mlp.down", c.dim, c.ffn_dim, l.down_weight, l.down_bias, kRow);
  }
  unit = head_unit();
  norm("norm", final_norm_weight_, final_norm_bias_);
  lm_head_ = c.tie_embeddings ? tok_embeddings_
                              : &params_.declare("lm_head.weight", {c.vocab_size, c.dim}, true, unit, vocabulary);
  lm_head_->compute_only = !c.tie_embeddings;  // the lookup reads the embeddings' master weights
}

void Transformer::declare_lora() {
  const LoraConfig& lora = *lora_;
  uint64_t stream = 0;
  for (const LoraTarget& t : lora_targets(config_, lora)) {
    const bool split_rows = t.splits_rows(tp_size_), split_columns = t.splits_columns(tp_size_);
    const TensorSplit part{.dim = split_rows ? 0 : 1, .parts = tp_size_, .index = tp_rank_};
    // The adapters of split inputs (out, down) draw each rank's own dropout masks;
    // the others see the same whole input, and the same masks, on every rank.
    ++stream;
    HONE_CHECK(stream < (1 << 16) && tp_rank_ < (1 << 8), "{} LoRA adapters on tensor-parallel rank {}: the dropout "
               "masks' streams number at most 65535 adapters on 256 ranks", stream, tp_rank_);
    LoraAdapter a{.module = t.module, .base = &params_.get(t.base), .a = nullptr, .b = nullptr,
                  .row_begin = t.row_begin_per_rank(tp_size_), .rows = t.rows_per_rank(tp_size_),
                  .stream = split_columns ? stream | uint64_t(tp_rank_) << 16 : stream, .u = Tensor()};
    const int unit = t.layer < 0 ? head_unit() : layer_unit(t.layer);
    a.a = &lora_params_.declare(t.a_name(), {lora.rank, t.in}, true, unit,
                                split_columns ? part : TensorSplit{});
    a.b = &lora_params_.declare(t.b_name(), {t.rows, lora.rank}, true, unit,
                                split_rows ? part : TensorSplit{});
    a.a->compute_only = a.b->compute_only = true;
    // The magnitudes are per-row gains: no weight decay, as the norms' scales.
    if (lora.use_dora) a.magnitude = &lora_params_.declare(t.magnitude_name(), {t.rows}, false, unit);
    if (t.layer < 0) {
      output_adapters_.push_back(a);
      continue;
    }
    const Projection projection = t.module == "output_proj" ? kOut
                                  : t.module == "down_proj"  ? kDown
                                  : t.base.ends_with("mlp.up.weight") ? kUp
                                                                       : kQkv;
    layer_adapters_[size_t(t.layer)][projection].push_back(a);
  }
}

void Transformer::init_lora(uint64_t seed) {
  if (!lora_) return;
  dropout_seed_ = seed;
  uint64_t stream = 0;
  for (Parameter& p : lora_params_.all()) {
    if (p.name.ends_with(".magnitude")) continue;  // below, from the base weights
    Tensor host = Tensor::zeros(p.whole_shape, lora_params_.values().dtype());  // drawn whole, as init_weights
    if (p.name.ends_with(".a")) {
      const double bound = 1.0 / std::sqrt(double(p.whole_shape[1]));
      Generator draws(seed, random_stream(RandomUse::lora_init, stream));
      if (host.dtype() == DType::f64) draws.uniform(std::span(host.data<double>(), size_t(host.numel())), -bound, bound);
      else draws.uniform(std::span(host.data<float>(), size_t(host.numel())), -bound, bound);
    }
    lora_params_.write(p, host);
    ++stream;
  }
  // DoRA's magnitudes start at the norms of the base rows they scale (B = 0),
  // as the forward computes them (from the weights it reads): its scales m/‖W‖
  // are then exactly 1, and the model starts as its base (as PEFT's, whose
  // forward recomputes the norms its initialization took).
  for_each_adapter([&](LoraAdapter& a) {
    if (!a.magnitude) return;
    a.magnitude->value.zero_();  // read for the scales, which this call does not need
    const Tensor norms = Tensor::empty({a.rows}, a.magnitude->value.dtype(), device_);
    dora_norms(a, norms);
    lora_params_.write(*a.magnitude, norms.to(Device::cpu()));
  });
  lora_params_.sync_compute();
}

void Transformer::for_each_adapter(const std::function<void(LoraAdapter&)>& fn) {
  for (auto& layer : layer_adapters_)
    for (auto& projection : layer)
      for (LoraAdapter& a : projection) fn(a);
  for (LoraAdapter& a : output_adapters_) fn(a);
}

void Transformer::merge_lora() {
  if (!lora_) return;
  for_each_adapter([&](LoraAdapter& a) {
    // Split by tensor parallelism, each rank merges its parts.
    merge_adapter(a.base->value, a.row_begin, a.rows, a.a->value, a.b->value, lora_->scale(),
                  a.magnitude ? a.magnitude->value : Tensor());
    a.b->value.zero_();
  });
  // DoRA's rows now have their magnitudes' norms, which the scale m/‖W‖ keeps: 1.
  params_.sync_compute();
  lora_params_.sync_compute();
}

uint64_t Transformer::dropout_stream(const LoraAdapter& adapter) const {
  return random_stream(RandomUse::lora_dropout, adapter.stream << 32 | (dropout_round_ & 0xffffffffu));
}

Tensor Transformer::adapter_input(const Tensor& x, const LoraAdapter& adapter, int64_t first_row) const {
  if (!training_ || lora_->dropout == 0) return x;
  Tensor dropped = Tensor::empty(x.shape(), x.dtype(), x.device());
  ops::dropout(x, dropped, lora_->dropout, dropout_seed_, dropout_stream(adapter), first_row * x.size(-1));
  return dropped;
}

void Transformer::adapter_inputs(const Tensor& x, std::vector<LoraAdapter>& adapters, int64_t first_row) {
  const int64_t rows = x.numel() / x.size(-1), in = x.size(-1);
  for (LoraAdapter& a : adapters) {
    resize_rows(a.u, rows, lora_->rank, dtype_, device_);
    ops::linear_forward(adapter_input(x, a, first_row).view({rows, in}), a.a->compute, Tensor(), a.u);
  }
}

void Transformer::dora_norms(LoraAdapter& a, const Tensor& norms) {
  if (!a.scale.defined()) {
    a.scale = Tensor::empty({a.rows}, a.magnitude->value.dtype(), device_);
    a.inv_norm = Tensor::empty({a.rows}, a.magnitude->value.dtype(), device_);
  }
  ops::dora_norms(weight_rows(a.base->compute, a.row_begin, a.rows), a.a->value, a.b->value, lora_->scale(),
                  a.magnitude->value, a.scale, a.inv_norm, norms);
}

void Transformer::dora_block_output(const Tensor& x, const Parameter* weight, LoraAdapter& a, int64_t first_row) {
  const int64_t rows = x.numel() / x.size(-1), in = x.size(-1);
  resize_rows(a.z, rows, a.rows, dtype_, device_);
  ops::linear_forward(x.view({rows, in}), weight_rows(weight->compute, a.row_begin, a.rows), Tensor(), a.z);
  const Tensor delta = Tensor::empty({rows, a.rows}, dtype_, device_);
  ops::linear_forward(a.u, a.b->compute, Tensor(), delta);
  ops::add_columns(a.z, 0, delta, lora_->scale());
  a.z_first_row = first_row;
}

void Transformer::project(const Tensor& x, const Parameter* weight, const Parameter* bias,
                          std::vector<LoraAdapter>& adapters, const Tensor& y, int64_t first_row) {
  ops::linear_forward(x, weight->compute, bias ? bias->value : Tensor(), y);
  if (adapters.empty() || !adapters_enabled_) return;
  adapter_inputs(x, adapters, first_row);
  const int64_t rows = x.numel() / x.size(-1);
  const Tensor y2 = y.view({rows, y.size(-1)});
  for (LoraAdapter& a : adapters) {
    const Tensor delta = Tensor::empty({rows, a.rows}, dtype_, device_);
    ops::linear_forward(a.u, a.b->compute, Tensor(), delta);
    ops::add_columns(y2, a.row_begin, delta, lora_->scale());
  }
  for (LoraAdapter& a : adapters) {
    if (!a.magnitude) continue;
    dora_norms(a);  // each call: cheap next to the product (rank·rows·in), and never stale
    resize_rows(a.z, rows, a.rows, dtype_, device_);
    ops::dora_scale_forward(y2, a.row_begin, a.scale, bias ? bias->value : Tensor(), a.z);
    a.z_first_row = first_row;
  }
}

void Transformer::project_backward(const Tensor& dy, const Tensor& x, const Parameter* weight,
                                   const Parameter* bias, std::vector<LoraAdapter>& adapters, const Tensor& dx,
                                   int64_t first_row) {
  const int64_t rows = x.numel() / x.size(-1), in = x.size(-1);
  // DoRA: the adapted columns' gradient scaled by m/‖W + s·B·A‖, in a copy (dy
  // may be the residual stream's, read again), and the magnitudes' gradient.
  // (A base with adapters is frozen: no bias gradient wants the unscaled dy.)
  const bool dora = std::any_of(adapters.begin(), adapters.end(), [](const LoraAdapter& a) { return a.magnitude; });
  const Tensor d_out = dora ? dy.clone() : dy;
  const Tensor dy2 = d_out.view({rows, dy.size(-1)});
  for (LoraAdapter& a : adapters) {
    if (!a.magnitude) continue;
    // Chunks of rows (the MLP's under checkpointing) keep only the last chunk's forward block.
    if (a.z_first_row != first_row || a.z.size(0) != rows) dora_block_output(x, weight, a, first_row);
    ops::dora_scale_backward(dy2, a.row_begin, a.z, a.scale, a.inv_norm, grad_to_add(a.magnitude));
  }
  ops::linear_backward(d_out, x, weight->compute, dx, weight->grad, grad_to_add(bias), /*accumulate_dx=*/false,
                       adds_to_grad(weight));
  if (adapters.empty()) return;
  const Tensor dx2 = dx.view({rows, in});
  const bool dropout = training_ && lora_->dropout > 0;
  for (LoraAdapter& a : adapters) {
    // With s = alpha/rank: dB += (s·dy)ᵀ·u, du = s·dy·B, dA += duᵀ·x_in, dx += mask ⊙ du·A.
    const Tensor scaled_dy = Tensor::empty({rows, a.rows}, dtype_, device_);
    ops::copy_columns(dy2, a.row_begin, scaled_dy, lora_->scale());
    const Tensor du = Tensor::empty({rows, lora_->rank}, dtype_, device_);
    ops::linear_backward(scaled_dy, a.u, a.b->compute, du, a.b->grad, Tensor(), /*accumulate_dx=*/false,
                         adds_to_grad(a.b));
    const Tensor input = adapter_input(x, a, first_row).view({rows, in});
    if (!dropout) {
      ops::linear_backward(du, input, a.a->compute, dx2, a.a->grad, Tensor(), /*accumulate_dx=*/true,
                           adds_to_grad(a.a));
      continue;
    }
    const Tensor dx_adapter = Tensor::empty({rows, in}, dtype_, device_);
    ops::linear_backward(du, input, a.a->compute, dx_adapter, a.a->grad, Tensor(), /*accumulate_dx=*/false,
                         adds_to_grad(a.a));
    ops::dropout(dx_adapter, dx_adapter, lora_->dropout, dropout_seed_, dropout_stream(a), first_row * in);
    ops::add_(dx2, dx_adapter);
  }
}

void Transformer::init_weights(uint64_t seed) {
  const double residual_std = config_.init_std / std::sqrt(2.0 * double(config_.n_layers));
  uint64_t stream = 0;
  // Drawn in fp32 (fp64) whatever the weights are kept in: write() casts.
  const DType drawn = params_.values().dtype() == DType::f64 ? DType::f64 : DType::f32;
  for (Parameter& p : params_.all()) {
    Tensor host = Tensor::empty(p.whole_shape, drawn);  // drawn whole: tp ranks keep their parts
    const bool is_norm = p.name.find("norm") != std::string::npos;
    const bool is_bias = p.name.ends_with(".bias");
    const bool residual_projection = p.name.ends_with("attn.out.weight") || p.name.ends_with("mlp.down.weight");
    auto fill = [&]<typename M>(M* data) {
      std::span<M> values(data, size_t(host.numel()));
      if (is_bias) {
        std::fill(values.begin(), values.end(), M(0));
      } else if (is_norm) {
        std::fill(values.begin(), values.end(), M(1));
      } else {
        // One stream per parameter: a parameter's values do not depend on the others.
        Generator(seed, random_stream(RandomUse::weight_init, stream))
            .normal(values, 0.0, residual_projection ? residual_std : config_.init_std);
      }
    };
    if (host.dtype() == DType::f64) fill(host.data<double>());
    else fill(host.data<float>());
    params_.write(p, host);
    ++stream;
  }
  params_.sync_compute();
  init_lora(seed);
}

void Transformer::reserve(int64_t batch, int64_t seq) {
  HONE_CHECK(batch > 0 && seq > 0, "batch size and sequence length must be positive, got {} and {}", batch, seq);
  HONE_CHECK(seq <= config_.max_seq_len, "sequence length {} exceeds the model's max_seq_len {}", seq,
             config_.max_seq_len);
  if (acts_.batch == batch && acts_.seq == seq) return;
  input_copies_.reset();  // its copies may still use the arena
  acts_ = Activations();  // free the old arena before making the new one
  ActivationOptions options = plan_options_;
  options.offload_inputs = options.offload_inputs && options.checkpointing;  // nothing to offload otherwise
  options.tp = tp_size_;
  arena_bytes_ = hone::activation_bytes(config_, dtype_, batch, seq, options, device_);
  // Fine-tuning batches are cut to their longest sample, so the shape changes
  // from step to step: one that fits the memory held is planned in it, with no
  // allocation (and on the CPU no page faults) per step.
  Arena arena(hold_at_least(arena_memory_, int64_t(arena_bytes_), DType::u8, device_));
  acts_ = plan_activations(config_, dtype_, batch, seq, arena, options);
  if (options.offload_inputs) {
    const Shape inputs{config_.n_layers, batch * seq / tp_size_, config_.dim};
    const Tensor host = hold_at_least(offloaded_inputs_, inputs.numel(), dtype_, Device::cpu()).slice(0, inputs);
    input_copies_ = std::make_unique<ops::OverlappedCopies>(device_, host, 2);
  }
  ensure_rope_tables(seq);
}

template <typename V>
void Transformer::replan(V ActivationOptions::*option, V value) {
  if (plan_options_.*option == value) return;
  plan_options_.*option = value;
  input_copies_.reset();  // its copies may still use the arena
  acts_ = Activations();  // planned again by the next reserve() or forward(), in memory of the new size
  arena_memory_ = Tensor();
  offloaded_inputs_ = Tensor();
}

void Transformer::set_activation_checkpointing(bool on) { replan(&ActivationOptions::checkpointing, on); }
void Transformer::set_activation_offloading(bool on) { replan(&ActivationOptions::offload_inputs, on); }
void Transformer::set_chunk_bytes(size_t bytes) {
  replan(&ActivationOptions::head_weight_gradient, false);  // the budget asked, exactly
  replan(&ActivationOptions::chunk_bytes, bytes);
}

void Transformer::check_logits_whole() const {
  HONE_CHECK(!acts_.logits.defined() || acts_.logits.size(0) == acts_.logits_lse.numel(),
             "the last forward pass computed its {} rows of logits in chunks of {} rows; "
             "set_chunk_bytes(kNoChunks) keeps them all", acts_.logits_lse.numel(), acts_.logits.size(0));
}

Tensor Transformer::logits() const {
  check_logits_whole();
  const int64_t columns = vocab_part().columns;
  if (!acts_.logits.defined() || acts_.logits.size(1) == columns) return acts_.logits;
  const Tensor packed = Tensor::empty({acts_.logits.size(0), columns}, dtype_, device_);
  ops::copy_columns(acts_.logits, 0, packed, 1.0);
  return packed;
}

void Transformer::ensure_rope_tables(int64_t positions) {
  if (config_.position != PositionKind::rope || (rope_cos_.defined() && rope_cos_.size(0) >= positions)) return;
  const DType table_dtype = dtype_ == DType::f64 ? DType::f64 : DType::f32;
  RopeTables tables = rope_tables(config_, positions);
  const Shape shape{positions, config_.head_dim() / 2};
  rope_cos_ = to_tensor(tables.cos, shape, table_dtype, device_);
  rope_sin_ = to_tensor(tables.sin, shape, table_dtype, device_);
}

ops::AttentionHeads Transformer::heads() const {
  return {.n_heads = config_.n_heads / tp_size_, .n_kv_heads = config_.n_kv_heads / tp_size_,
          .head_dim = config_.head_dim()};
}

ops::GeluApproximation Transformer::gelu_approximation() const {
  return config_.mlp == MlpKind::gelu_tanh ? ops::GeluApproximation::tanh : ops::GeluApproximation::none;
}

Tensor Transformer::rows_of(const Tensor& all) const {
  const int64_t rows = acts_.batch * acts_.seq / tp_size_, width = all.size(-1);
  return all.view({all.numel()}).slice(tp_rank_ * rows * width, {rows, width});
}

void Transformer::gather_rows(const Tensor& rows, const Tensor& all) const {
  if (tp_) tp_->all_gather(rows, all);
}

void Transformer::reduce_scatter_rows(const Tensor& all, const Tensor& rows) const {
  if (tp_) tp_->reduce_scatter(all, rows);
}

Tensor Transformer::row_values_of(const Tensor& all) const {
  return rows_of(all.view({all.numel(), 1})).view({all.numel() / tp_size_});
}

Tensor Transformer::loss_targets() const {
  const Tensor all = targets_.view({targets_.numel()});
  return tp_ && !split_vocabulary_ ? row_values_of(all) : all;
}

std::vector<Transformer::HeadChunk> Transformer::head_chunks() const {
  const Activations& a = acts_;
  const int64_t rows = a.logits_lse.numel(), chunk_rows = a.logits.size(0);
  const Tensor targets = loss_targets();
  const Tensor& d_input = split_vocabulary_ ? a.d_norm_all : a.d_norm;  // the head reads final_norm_all
  std::vector<HeadChunk> chunks;
  for (int64_t first = 0; first < rows; first += chunk_rows) {
    const int64_t n = std::min(chunk_rows, rows - first);
    chunks.push_back({.first = first,
                      .input = a.final_norm_all.rows(first, n),
                      .logits = a.logits.rows(0, n),
                      .targets = targets.rows(first, n),
                      .losses = a.token_losses.rows(first, n),
                      .lse = a.logits_lse.rows(first, n),
                      .d_input = d_input.rows(first, n)});
  }
  return chunks;
}

Tensor Transformer::token_losses() const {
  return split_vocabulary_ ? row_values_of(acts_.token_losses) : acts_.token_losses;
}

ops::VocabPart Transformer::vocab_part() const {
  if (!split_vocabulary_) return {.columns = config_.vocab_size};
  const int64_t columns = config_.vocab_size / tp_size_;
  return {.first = tp_rank_ * columns, .classes = config_.vocab_size, .columns = columns};
}

ops::LossSum Transformer::merge_vocab_parts(int64_t tokens) {
  // Per row, rank r has lse_r, the logsumexp of its classes, and lse_r - z_r,
  // where z_r is the target's logit on the rank that holds the target and 0 on
  // the others. So lse = log Σ_r exp(lse_r), z = Σ_r (lse_r - (lse_r - z_r)),
  // loss = lse - z. Two numbers per row and rank: all-gathered, merged on the host.
  const Tensor& lse = acts_.logits_lse;
  const Tensor& losses = acts_.token_losses;
  const int64_t rows = lse.numel();
  const Tensor mine = Tensor::empty({2, rows}, lse.dtype(), device_);
  mine[0].copy_from(lse);
  mine[1].copy_from(losses);
  const Tensor parts = Tensor::empty({tp_size_, 2, rows}, lse.dtype(), device_);
  tp_->all_gather(mine, parts);
  const std::vector<double> part = parts.to_vector<double>();
  const std::vector<int32_t> targets = targets_.to_vector<int32_t>();
  auto part_lse = [&](int r, int64_t row) { return part[size_t(2 * r * rows + row)]; };
  auto part_loss = [&](int r, int64_t row) { return part[size_t((2 * r + 1) * rows + row)]; };
  const size_t n = size_t(rows);
  std::vector<double> whole_lse(n), whole_losses(n, 0.0);
  ops::LossSum total{.sum = 0, .tokens = tokens};
  for (int64_t row = 0; row < rows; ++row) {
    double max = part_lse(0, row);
    for (int r = 1; r < tp_size_; ++r) max = std::max(max, part_lse(r, row));
    double sum = 0, target_logit = 0;
    for (int r = 0; r < tp_size_; ++r) {
      sum += std::exp(part_lse(r, row) - max);
      target_logit += part_lse(r, row) - part_loss(r, row);
    }
    whole_lse[size_t(row)] = max + std::log(sum);
    if (targets[size_t(row)] != ops::kIgnoreIndex) whole_losses[size_t(row)] = whole_lse[size_t(row)] - target_logit;
    total.sum += whole_losses[size_t(row)];
  }
  lse.copy_from(to_tensor(whole_lse, {rows}, lse.dtype(), device_));
  losses.copy_from(to_tensor(whole_losses, {rows}, losses.dtype(), device_));
  return total;
}

void Transformer::norm_forward(const Tensor& x, Parameter* weight, Parameter* bias, const Tensor& y,
                               const Tensor& mean, const Tensor& rstd, const ops::ResidualAdd& residual) {
  if (config_.norm == NormKind::rmsnorm) {
    ops::rmsnorm_forward(x, weight->value, y, rstd, config_.norm_eps, residual);
  } else {
    ops::layernorm_forward(x, weight->value, bias ? bias->value : Tensor(), y, mean, rstd, config_.norm_eps,
                           residual);
  }
}

void Transformer::norm_backward(const Tensor& dy, const Tensor& x, Parameter* weight, Parameter* bias,
                                const Tensor& mean, const Tensor& rstd, const Tensor& dx) {
  if (config_.norm == NormKind::rmsnorm) {
    ops::rmsnorm_backward(dy, x, weight->value, rstd, dx, grad_to_add(weight));
  } else {
    ops::layernorm_backward(dy, x, weight->value, mean, rstd, dx, grad_to_add(weight), grad_to_add(bias));
  }
}

namespace {

const Tensor& value_or_none(const Parameter* p) {
  static const Tensor none;
  return p ? p->value : none;
}

// The parameters, their gradients settled (settle_grads): complete, for the
// data-parallel reduction to read.
std::vector<Parameter*> settled(std::vector<Parameter*> params) {
  settle_grads(params);
  return params;
}

}  // namespace

// Offloading: layer i's input lives in device buffer i % 2, whose copies are slot i % 2's.
void Transformer::offload_input(int64_t i) {
  const Tensor& host = input_copies_->host()[i];
  input_copies_->start(host, acts_.layers[size_t(i)].input.view(host.shape()), int(i % 2));
  input_copies_->wait(int((i + 1) % 2));  // layer i + 1's input goes over layer i - 1's, which may still be going out
}

void Transformer::restore_input(int64_t i) {
  input_copies_->wait(int(i % 2));  // it came back during layer i + 1 (the last layer's never left)
  if (i == 0) return;
  // Layer i - 1's comes back into layer i + 1's buffer while layer i runs.
  const Tensor& host = input_copies_->host()[i - 1];
  input_copies_->start(acts_.layers[size_t(i - 1)].input.view(host.shape()), host, int((i - 1) % 2));
}

void Transformer::forward_layer(int64_t i) {
  attention_norm(i, i > 0);
  if (input_copies_) offload_input(i);
  forward_attention(i);
  for (const MlpChunk& chunk : mlp_chunks()) {
    mlp_forward_input(i, chunk);
    mlp_forward_output(i, chunk);
  }
}

void Transformer::attention_norm(int64_t i, bool add_residual) {
  const LayerParameters& p = layers_[size_t(i)];
  const LayerActivations& l = acts_.layers[size_t(i)];
  if (add_residual) {
    norm_forward(acts_.layers[size_t(i - 1)].mid, p.attn_norm_weight, p.attn_norm_bias, l.attn_norm,
                 l.attn_norm_mean, l.attn_norm_rstd, {.branch = acts_.branch, .sum = l.input});
  } else {
    norm_forward(l.input, p.attn_norm_weight, p.attn_norm_bias, l.attn_norm, l.attn_norm_mean, l.attn_norm_rstd);
  }
}

void Transformer::forward_attention(int64_t i) {
  const ModelConfig& c = config_;
  Activations& a = acts_;
  const LayerParameters& p = layers_[size_t(i)];
  const LayerActivations& l = a.layers[size_t(i)];
  // out(attention(rope(qkv(norm(x))))), which the MLP's norm adds to x.
  // (Tensor parallelism: norms and residual adds on this rank's rows, the rest
  // on all rows and this rank's heads and ffn features.)
  gather_rows(l.attn_norm, l.attn_norm_all);
  auto& adapters = layer_adapters_[size_t(i)];
  project(l.attn_norm_all, p.qkv_weight, p.qkv_bias, adapters[kQkv], l.qkv);
  const ops::AttentionHeads h = heads();
  if (c.position == PositionKind::rope) {
    ops::rope_apply(l.qkv, rope_cos_, rope_sin_, h.n_heads + h.n_kv_heads, h.head_dim, 0, false, positions_);
  }
  ops::attention_forward(l.qkv, l.attn, l.attn_lse, alibi_slopes_, h, positions_);
  project(l.attn, p.out_weight, row_parallel_bias(p.out_bias), adapters[kOut], a.branch_all);
  reduce_scatter_rows(a.branch_all, a.branch);
}

std::vector<Transformer::MlpChunk> Transformer::mlp_chunks() const {
  const int64_t rows = acts_.layers[0].mid.numel() / config_.dim;
  if (acts_.mlp_rows == rows) return {MlpChunk{.whole = true, .first = 0, .rows = rows}};
  std::vector<MlpChunk> chunks;
  for (int64_t first = 0; first < rows; first += acts_.mlp_rows) {
    chunks.push_back({.whole = false, .first = first, .rows = std::min(acts_.mlp_rows, rows - first)});
  }
  return chunks;
}

void Transformer::mlp_forward_input(int64_t i, const MlpChunk& chunk) {
  const ModelConfig& c = config_;
  const LayerParameters& p = layers_[size_t(i)];
  const LayerActivations& l = acts_.layers[size_t(i)];
  // mid = input + the attention branch, norm(mid), up(·) and the activation, on the chunk's rows. (Chunk by chunk
  // the branch's rows are read here before the chunk's down projection writes the MLP's branch over them.)
  const Tensor norm = chunk.working(l.mlp_norm), up = chunk.working(l.mlp_up), act = chunk.working(l.mlp_act);
  norm_forward(chunk.part(l.input), p.mlp_norm_weight, p.mlp_norm_bias, norm, chunk.working(l.mlp_norm_mean),
               chunk.working(l.mlp_norm_rstd), {.branch = chunk.part(acts_.branch), .sum = chunk.part(l.mid)});
  gather_rows(norm, chunk.working(l.mlp_norm_all));
  const Tensor input = chunk.working(l.mlp_norm_all);
  std::vector<LoraAdapter>& up_adapters = layer_adapters_[size_t(i)][kUp];
  if (c.mlp != MlpKind::swiglu && up_adapters.empty()) {
    ops::linear_gelu_forward(input, p.up_weight->compute, p.up_bias ? p.up_bias->value : Tensor(), up, act,
                             gelu_approximation());
    return;
  }
  project(input, p.up_weight, p.up_bias, up_adapters, up, chunk.first);
  if (c.mlp == MlpKind::swiglu) ops::swiglu_forward(up, act);
  else ops::gelu_forward(up, act, gelu_approximation());
}

void Transformer::mlp_forward_output(int64_t i, const MlpChunk& chunk) {
  Activations& a = acts_;
  const LayerParameters& p = layers_[size_t(i)];
  const LayerActivations& l = a.layers[size_t(i)];
  // down(·), which the next norm adds to mid
  project(chunk.working(l.mlp_act), p.down_weight, row_parallel_bias(p.down_bias), layer_adapters_[size_t(i)][kDown],
          chunk.part(a.branch_all), chunk.first);
  reduce_scatter_rows(a.branch_all, a.branch);
}

void Transformer::forward_hidden(const Tensor& tokens, const Tensor& positions) {
  HONE_CHECK(tokens.ndim() == 2, "tokens have shape {}, expected [batch, seq]", tokens.shape().str());
  const int64_t batch = tokens.size(0), seq = tokens.size(1);
  reserve(batch, seq);
  tokens_ = tokens;
  targets_ = Tensor();
  positions_ = positions.defined() ? ops::TokenPositions::checked(positions, device_) : ops::TokenPositions();
  head_grad_scale_.reset();
  const ModelConfig& c = config_;
  Activations& a = acts_;

  const int64_t n = c.n_layers;
  acquire(kEmbeddingUnit, false, layer_unit(0));
  const Tensor& first = a.layers[0].input;
  // Offloading: layer i's input buffer is i % 2's; the embedding writes buffer 0.
  if (input_copies_) input_copies_->wait(0);
  // Under tp every rank looks up all rows and keeps its own; a split vocabulary
  // looks up the ids this rank holds (zeros elsewhere), rank 0 adds the
  // positions, and the sums come reduce-scattered into rows.
  ops::embedding_forward(tokens, tok_embeddings_->value, adds_positions() ? value_or_none(pos_embeddings_) : Tensor(),
                         tp_ ? a.branch_all : first, positions_, vocab_part());
  if (split_vocabulary_) reduce_scatter_rows(a.branch_all, first);
  else if (tp_) first.copy_from(rows_of(a.branch_all));
  if (lm_head_ != tok_embeddings_) release(kEmbeddingUnit);  // a tied output projection reads it at the end
  for (int64_t i = 0; i < n; ++i) {
    acquire(layer_unit(i), false, i + 1 < n ? layer_unit(i + 1) : head_unit());
    forward_layer(i);
    release(layer_unit(i));
  }
  acquire(head_unit(), false);  // held into backward, which starts there
  norm_forward(a.layers[size_t(n - 1)].mid, final_norm_weight_, final_norm_bias_, a.final_norm, a.final_norm_mean,
               a.final_norm_rstd, {.branch = a.branch, .sum = a.output});
  if (split_vocabulary_) gather_rows(a.final_norm, a.final_norm_all);
}

std::vector<Tensor> Transformer::forward_rows(const Tensor& tokens, std::span<const RowRange> ranges) {
  HONE_CHECK(tp_ == nullptr, "forward_rows runs on one rank; tensor parallelism splits the rows");
  forward_hidden(tokens, Tensor());
  std::vector<Tensor> logits;
  for (const RowRange& r : ranges) {
    HONE_CHECK(r.first >= 0 && r.count > 0 && r.first + r.count <= tokens.numel(),
               "rows [{}, {}) are not within the {} positions", r.first, r.first + r.count, tokens.numel());
    const Tensor& out = logits.emplace_back(Tensor::empty({r.count, config_.vocab_size}, dtype_, device_));
    project(acts_.final_norm_all.rows(r.first, r.count), lm_head_, nullptr, output_adapters_, out, r.first);
  }
  return logits;
}

ops::LossSum Transformer::forward(const Tensor& tokens, const Tensor& targets, const Tensor& positions,
                                  std::optional<double> loss_scale) {
  forward_hidden(tokens, positions);
  Activations& a = acts_;
  if (!targets.defined()) {
    check_logits_whole();
    project(a.final_norm_all, lm_head_, nullptr, output_adapters_, a.logits);
    return {};
  }
  HONE_CHECK(targets.shape() == tokens.shape(), "targets have shape {}, tokens {}", targets.shape().str(),
             tokens.shape().str());
  targets_ = targets;
  forward_had_adapters_ = adapters_enabled_;
  // A split vocabulary needs every rank's logsumexp before any gradient.
  if (loss_scale && !split_vocabulary_) {
    head_grad_scale_ = loss_scale;
    acquire(head_unit(), true);  // its gradients come now
    if (lm_head_ == tok_embeddings_) acquire(kEmbeddingUnit, true);
  }
  ops::LossSum loss{.sum = 0, .tokens = 0};
  for (const HeadChunk& chunk : head_chunks()) {
    head_forward(chunk);
    const ops::LossSum part =
        head_grad_scale_
            ? ops::cross_entropy_forward_backward(chunk.logits, chunk.targets, chunk.losses, chunk.lse,
                                                  *head_grad_scale_, vocab_part())
            : ops::cross_entropy_forward(chunk.logits, chunk.targets, chunk.losses, chunk.lse, vocab_part());
    if (head_grad_scale_) head_backward(chunk);  // while the chunk's logits are at hand
    loss.sum += part.sum;
    loss.tokens += part.tokens;
  }
  if (split_vocabulary_) return merge_vocab_parts(loss.tokens);  // every rank: the whole batch's
  if (!tp_) return loss;
  // The whole batch's loss: every rank's rows.
  const Tensor sum = Tensor::from(std::vector{loss.sum, double(loss.tokens)}, {2}).to(device_);
  tp_->all_reduce(sum);
  const std::vector<double> total = sum.to_vector<double>();
  return {.sum = total[0], .tokens = int64_t(total[1])};
}

std::vector<Parameter*> Transformer::trainable_in_layer(int64_t i) {
  std::vector<Parameter*> trainable;
  const auto add = [&](std::initializer_list<Parameter*> params) {
    for (Parameter* p : params) {
      if (p != nullptr) trainable.push_back(p);
    }
  };
  const auto add_adapters = [&](const std::vector<LoraAdapter>& adapters) {
    for (const LoraAdapter& a : adapters) add({a.a, a.b, a.magnitude});
  };
  if (i < 0) {
    if (base_frozen_) {
      add_adapters(output_adapters_);
    } else {
      add({final_norm_weight_, final_norm_bias_, lm_head_ == tok_embeddings_ ? nullptr : lm_head_});
    }
    return trainable;
  }
  if (base_frozen_) {
    for (const auto& adapters : layer_adapters_[size_t(i)]) add_adapters(adapters);
    return trainable;
  }
  const LayerParameters& p = layers_[size_t(i)];
  add({p.attn_norm_weight, p.attn_norm_bias, p.qkv_weight, p.qkv_bias, p.out_weight, p.out_bias, p.mlp_norm_weight,
       p.mlp_norm_bias, p.up_weight, p.up_bias, p.down_weight, p.down_bias});
  return trainable;
}

void Transformer::backward(double loss_scale, const GradientsFinal& on_final, const Tensor& token_weights) {
  HONE_CHECK(targets_.defined(), "backward() needs a forward pass with targets first");
  HONE_CHECK(forward_had_adapters_, "backward() after a forward pass with the adapters off");
  HONE_CHECK(lora_ || !base_frozen_, "backward() on a frozen model: it has nothing to train");
  if (token_weights.defined()) {
    HONE_CHECK(!head_grad_scale_ && !tp_,
               "token weights need a forward pass without a loss scale, and no tensor parallelism");
    HONE_CHECK(token_weights.numel() == targets_.numel(), "{} token weights for {} positions", token_weights.numel(),
               targets_.numel());
  }
  const ModelConfig& c = config_;
  Activations& a = acts_;

  const bool tied = lm_head_ == tok_embeddings_, train_embeddings = !base_frozen_;
  acquire(head_unit(), true, layer_unit(c.n_layers - 1));
  if (tied) acquire(kEmbeddingUnit, true);
  if (head_grad_scale_) {
    HONE_CHECK(*head_grad_scale_ == loss_scale,
               "backward() got loss scale {}, but the forward pass computed the loss gradient for {}", loss_scale,
               *head_grad_scale_);
  } else {
    const std::vector<HeadChunk> chunks = head_chunks();
    for (const HeadChunk& chunk : chunks) {
      if (chunks.size() > 1) head_forward(chunk);  // only the last chunk's logits are left
      const Tensor weights =
          token_weights.defined() ? token_weights.rows(chunk.first, chunk.targets.numel()) : Tensor();
      ops::cross_entropy_backward(chunk.logits, chunk.targets, chunk.lse, loss_scale, vocab_part(), weights);
      head_backward(chunk);
    }
  }
  // A split vocabulary: every row's input gradient is a sum over the ranks' classes.
  if (split_vocabulary_) reduce_scatter_rows(a.d_norm_all, a.d_norm);
  a.d_residual.zero_();
  norm_backward(a.d_norm, a.output, final_norm_weight_, final_norm_bias_, a.final_norm_mean, a.final_norm_rstd,
                a.d_residual);
  release(head_unit());
  if (on_final) on_final(settled(trainable_in_layer(-1)));
  for (int64_t i = c.n_layers - 1; i >= 0; --i) {
    const LayerParameters& p = layers_[size_t(i)];
    const LayerActivations& l = a.layers[size_t(i)];
    auto& adapters = layer_adapters_[size_t(i)];
    acquire(layer_unit(i), true, i > 0 ? layer_unit(i - 1) : train_embeddings ? kEmbeddingUnit : -1);
    const std::vector<MlpChunk> mlp = mlp_chunks();
    const bool recompute = plan_options_.checkpointing;  // refill the shared working set with layer i
    if (recompute) {
      if (input_copies_) restore_input(i);
      attention_norm(i, false);
      forward_attention(i);
    }
    // MLP block, chunk by chunk; the residual gradient flows on unchanged and the branch adds to it.
    for (const MlpChunk& chunk : mlp) {
      if (recompute) {  // the chunk's input side (down's output is not read)
        mlp_forward_input(i, chunk);
        // Down's adapters keep x·Aᵀ of the last chunk their forward pass saw.
        if (mlp.size() > 1) adapter_inputs(chunk.working(l.mlp_act), adapters[kDown], chunk.first);
      }
      const Tensor up = chunk.working(l.mlp_up), d_act = chunk.working(a.d_mlp_act);
      gather_rows(a.d_residual, a.d_residual_all);
      const Tensor dy = chunk.part(a.d_residual_all);
      // A GELU MLP's down projection gives its input gradient through GELU in one op (below), into d_act.
      const bool through_gelu = c.mlp != MlpKind::swiglu && adapters[kDown].empty();
      project_backward(dy, chunk.working(l.mlp_act), p.down_weight, row_parallel_bias(p.down_bias), adapters[kDown],
                       through_gelu ? Tensor() : d_act, chunk.first);
      const Tensor& d_up = through_gelu ? d_act : up;  // else written over the pre-activation, read no more
      if (through_gelu) ops::linear_gelu_input_backward(dy, p.down_weight->compute, up, d_up, gelu_approximation());
      else if (c.mlp == MlpKind::swiglu) ops::swiglu_backward(d_act, up, d_up);
      else ops::gelu_backward(d_act, up, d_up, gelu_approximation());
      project_backward(d_up, chunk.working(l.mlp_norm_all), p.up_weight, p.up_bias, adapters[kUp],
                       chunk.part(a.d_norm_all), chunk.first);
      reduce_scatter_rows(a.d_norm_all, a.d_norm);
      norm_backward(chunk.part(a.d_norm), chunk.part(l.mid), p.mlp_norm_weight, p.mlp_norm_bias,
                    chunk.working(l.mlp_norm_mean), chunk.working(l.mlp_norm_rstd), chunk.part(a.d_residual));
    }
    // Attention block.
    gather_rows(a.d_residual, a.d_residual_all);
    project_backward(a.d_residual_all, l.attn, p.out_weight, row_parallel_bias(p.out_bias), adapters[kOut],
                     a.d_attn);
    const ops::AttentionHeads h = heads();
    ops::attention_backward(a.d_attn, l.qkv, l.attn, l.attn_lse, alibi_slopes_, a.d_qkv, h, positions_);
    if (c.position == PositionKind::rope) {
      ops::rope_apply(a.d_qkv, rope_cos_, rope_sin_, h.n_heads + h.n_kv_heads, h.head_dim, 0, true, positions_);
    }
    project_backward(a.d_qkv, l.attn_norm_all, p.qkv_weight, p.qkv_bias, adapters[kQkv], a.d_norm_all);
    reduce_scatter_rows(a.d_norm_all, a.d_norm);
    norm_backward(a.d_norm, l.input, p.attn_norm_weight, p.attn_norm_bias, l.attn_norm_mean, l.attn_norm_rstd,
                  a.d_residual);
    release(layer_unit(i));
    if (on_final) on_final(settled(trainable_in_layer(i)));
  }
  if (train_embeddings) {
    acquire(kEmbeddingUnit, true);
    // A split vocabulary: every row's gradient to the ids this rank holds (and,
    // on rank 0, to the positions); otherwise this rank's rows' part of it.
    if (split_vocabulary_) {
      gather_rows(a.d_residual, a.d_residual_all);
    } else if (tp_) {
      a.d_residual_all.zero_();
      rows_of(a.d_residual_all).copy_from(a.d_residual);
    }
    ops::embedding_backward(tokens_, a.d_residual_all, grad_to_add(tok_embeddings_),
                            adds_positions() ? grad_to_add(pos_embeddings_) : Tensor(), positions_, vocab_part());
  }
  // What no op wrote this step (a rank's share that another owns) reads as zero.
  for (const Parameter& p : trainable_params().all()) grad_to_add(&p);
  if (tied || train_embeddings) release(kEmbeddingUnit);
  targets_ = Tensor();  // the logits now hold gradients: a second backward would be wrong
  head_grad_scale_.reset();
}

}  // namespace hone
