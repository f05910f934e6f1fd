#include "hone/model/decoder.hpp"

#include <algorithm>

namespace hone {

Decoder::Decoder(Transformer& model, int64_t max_sequences, int64_t capacity)
    : model_(model),
      capacity_(capacity),
      lengths_(static_cast<size_t>(max_sequences), 0),
      model_was_checkpointing_(model.activation_checkpointing()) {
  HONE_CHECK(model.tp_size() == 1, "decoding with a KV cache runs on one rank; this model is split over {} (tensor "
             "parallelism)", model.tp_size());
  model_.set_activation_checkpointing(false);
  const ModelConfig& c = model.config();
  HONE_CHECK(capacity > 0 && capacity <= c.max_seq_len,
             "generation needs {} positions but the model has max_seq_len {}", capacity, c.max_seq_len);
  HONE_CHECK(max_sequences > 0, "generation needs at least one sequence");
  const Shape shape{max_sequences, capacity, c.n_kv_heads * c.head_dim()};
  for (int64_t l = 0; l < c.n_layers; ++l) {
    k_cache_.push_back(Tensor::zeros(shape, model.dtype(), model.device()));
    v_cache_.push_back(Tensor::zeros(shape, model.dtype(), model.device()));
  }
  model_.ensure_rope_tables(capacity);
}

Decoder::~Decoder() { model_.set_activation_checkpointing(model_was_checkpointing_); }

size_t Decoder::cache_bytes() const { return 2 * k_cache_.size() * (k_cache_.empty() ? 0 : k_cache_[0].nbytes()); }

Tensor Decoder::slot_rows(const Tensor& cache, int64_t slot, int64_t length) const {
  const int64_t kv_width = cache.size(2);
  return cache.view({cache.numel() / kv_width, kv_width}).rows(slot * capacity_, length);
}

Tensor Decoder::prefill(int64_t slot, std::span<const int32_t> prompt) {
  const std::vector<int32_t> prompts[] = {std::vector<int32_t>(prompt.begin(), prompt.end())};
  return prefill(std::span(&slot, 1), prompts)[0];
}

Tensor Decoder::prefill(std::span<const int64_t> slots, std::span<const std::vector<int32_t>> prompts) {
  HONE_CHECK(slots.size() == prompts.size() && !prompts.empty(), "prefill: {} slots for {} prompts", slots.size(),
             prompts.size());
  size_t longest = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t n = int64_t(prompts[i].size());
    HONE_CHECK(slots[i] >= 0 && slots[i] < int64_t(lengths_.size()), "no cache slot {}", slots[i]);
    HONE_CHECK(n >= 1 && n <= capacity_, "a prompt of {} tokens does not fit a cache of {} positions", n, capacity_);
    longest = std::max(longest, prompts[i].size());
  }
  const Tensor logits =
      Tensor::empty({int64_t(prompts.size()), model_.config().vocab_size}, model_.dtype(), model_.device());
  // Rows of consecutive prompts, each as long as the budget allows.
  const size_t budget = std::max(longest, size_t(std::min(kPrefillRowTokens, model_.config().max_seq_len)));
  for (size_t first = 0; first < prompts.size();) {
    size_t end = first, tokens = 0;
    while (end < prompts.size() && tokens + prompts[end].size() <= budget) tokens += prompts[end++].size();
    prefill_row(slots.subspan(first, end - first), prompts.subspan(first, end - first),
                logits.rows(int64_t(first), int64_t(end - first)));
    first = end;
  }
  return logits.to(Device::cpu());
}

void Decoder::prefill_row(std::span<const int64_t> slots, std::span<const std::vector<int32_t>> prompts,
                          const Tensor& logits) {
  const ModelConfig& c = model_.config();
  std::vector<int32_t> tokens, positions;  // each token's position within its own prompt
  for (const std::vector<int32_t>& prompt : prompts) {
    tokens.insert(tokens.end(), prompt.begin(), prompt.end());
    for (size_t t = 0; t < prompt.size(); ++t) positions.push_back(int32_t(t));
  }
  const Shape row{1, int64_t(tokens.size())};
  // Without other prompts in the row, positions are the default 0..n-1.
  model_.forward_hidden(Tensor::from(tokens, row).to(model_.device()),
                        prompts.size() > 1 ? Tensor::from(positions, row) : Tensor());
  // Keep each layer's keys and values: the k and v heads of the fused qkv rows,
  // one column-block copy per prompt, layer and cache (a copy per row was
  // 2·n·layers transfers, each a separate call on a GPU).
  const int64_t q_width = c.n_heads * c.head_dim(), kv_width = c.n_kv_heads * c.head_dim();
  std::vector<int32_t> last_rows;  // each prompt's last position in the row
  int64_t offset = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t n = int64_t(prompts[i].size()), slot = slots[i];
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const Tensor& qkv = model_.acts_.layers[size_t(l)].qkv;
      const Tensor prompt_rows = qkv.view({qkv.numel() / c.qkv_dim(), c.qkv_dim()}).rows(offset, n);
      ops::copy_columns(prompt_rows, q_width, slot_rows(k_cache_[size_t(l)], slot, n), 1.0);
      ops::copy_columns(prompt_rows, q_width + kv_width, slot_rows(v_cache_[size_t(l)], slot, n), 1.0);
    }
    lengths_[size_t(slot)] = n;
    offset += n;
    last_rows.push_back(int32_t(offset - 1));
  }
  // Only the last positions' logits: their rows gathered (a lookup by row
  // index), then the head on them alone, reading its weights once.
  const auto count = int64_t(prompts.size());
  const Tensor last = Tensor::empty({1, count, c.dim}, model_.dtype(), model_.device());
  ops::embedding_forward(Tensor::from(last_rows, {1, count}).to(model_.device()),
                         model_.acts_.final_norm_all.view({offset, c.dim}), Tensor(), last);
  model_.project(last.view({count, c.dim}), model_.lm_head_, nullptr, model_.output_adapters_, logits);
}

void Decoder::copy_slot(int64_t from, int64_t to) {
  const auto slots = int64_t(lengths_.size());
  HONE_CHECK(from >= 0 && from < slots && to >= 0 && to < slots, "no cache slot {} or {}", from, to);
  const int64_t n = lengths_[size_t(from)];
  for (size_t l = 0; l < k_cache_.size(); ++l) {
    slot_rows(k_cache_[l], to, n).copy_from(slot_rows(k_cache_[l], from, n));
    slot_rows(v_cache_[l], to, n).copy_from(slot_rows(v_cache_[l], from, n));
  }
  lengths_[size_t(to)] = n;
}

Tensor Decoder::decode(std::span<const int64_t> slots, std::span<const int32_t> tokens) {
  const ModelConfig& c = model_.config();
  const int64_t rows = int64_t(slots.size()), D = c.dim, hd = c.head_dim();
  const int64_t q_width = c.n_heads * hd;
  HONE_CHECK(int64_t(tokens.size()) == rows && rows > 0, "decode: {} tokens for {} sequences", tokens.size(), rows);
  std::vector<int64_t> positions;
  for (int64_t slot : slots) {
    HONE_CHECK(slot >= 0 && slot < int64_t(lengths_.size()) && lengths_[size_t(slot)] > 0,
               "decode: slot {} holds no prefilled sequence", slot);
    HONE_CHECK(lengths_[size_t(slot)] < capacity_, "decode: slot {} is full ({} positions)", slot, capacity_);
    positions.push_back(lengths_[size_t(slot)]);
  }
  const DType T = model_.dtype(), S = T == DType::f64 ? DType::f64 : DType::f32;
  const Device dev = model_.device();
  auto empty = [&](const Shape& shape, DType dtype) { return Tensor::empty(shape, dtype, dev); };
  const Tensor x = empty({rows, 1, D}, T), norm = empty({rows, 1, D}, T), branch = empty({rows, 1, D}, T);
  const Tensor mean = empty({rows}, S), rstd = empty({rows}, S);
  const Tensor qkv = empty({rows, 1, c.qkv_dim()}, T), attn = empty({rows, q_width}, T);
  const Tensor up = empty({rows, 1, c.mlp_up_dim()}, T), act = empty({rows, 1, c.ffn_dim}, T);
  const ops::DecodeRows step(slots, positions, int64_t(lengths_.size()), capacity_, dev);

  // Each branch of the residual stream x (and the learned positions) is added
  // to x by the norm that reads x next, in the same op.
  bool branch_to_add = false;
  const auto norm_of_x = [&](Parameter* weight, Parameter* bias) {
    model_.norm_forward(x, weight, bias, norm, mean, rstd,
                        branch_to_add ? ops::ResidualAdd{.branch = branch, .sum = x} : ops::ResidualAdd{});
    branch_to_add = false;
  };
  const Tensor ids = Tensor::from(std::vector<int32_t>(tokens.begin(), tokens.end()), {rows, 1}).to(dev);
  ops::embedding_forward(ids, model_.tok_embeddings_->value, Tensor(), x);
  if (model_.pos_embeddings_) {
    // The learned positions are a second table looked up by position (below
    // capacity_, which the constructor keeps within max_seq_len).
    ops::embedding_forward(step.position_ids(), model_.pos_embeddings_->value, Tensor(), branch);
    branch_to_add = true;
  }
  const Tensor qkv_rows = qkv.view({rows, c.qkv_dim()});
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerParameters& p = model_.layers_[size_t(l)];
    norm_of_x(p.attn_norm_weight, p.attn_norm_bias);
    ops::linear_forward(norm, p.qkv_weight->compute, p.qkv_bias ? p.qkv_bias->value : Tensor(), qkv);
    // The rotary tables are absent (no rotation) unless the model uses RoPE.
    ops::kv_cache_append(qkv_rows, model_.rope_cos_, model_.rope_sin_, step, k_cache_[size_t(l)], v_cache_[size_t(l)],
                         model_.heads());
    ops::attention_decode(qkv_rows, k_cache_[size_t(l)], v_cache_[size_t(l)], step, model_.alibi_slopes_, attn,
                          model_.heads());
    ops::linear_forward(attn, p.out_weight->compute, p.out_bias ? p.out_bias->value : Tensor(),
                        branch.view({rows, D}));
    branch_to_add = true;
    norm_of_x(p.mlp_norm_weight, p.mlp_norm_bias);
    const Tensor up_bias = p.up_bias ? p.up_bias->value : Tensor();
    if (c.mlp == MlpKind::swiglu) {
      ops::linear_forward(norm, p.up_weight->compute, up_bias, up);
      ops::swiglu_forward(up, act);
    } else {
      ops::linear_gelu_forward(norm, p.up_weight->compute, up_bias, up, act, model_.gelu_approximation());
    }
    ops::linear_forward(act, p.down_weight->compute, p.down_bias ? p.down_bias->value : Tensor(), branch);
    branch_to_add = true;
  }
  norm_of_x(model_.final_norm_weight_, model_.final_norm_bias_);
  const Tensor logits = empty({rows, c.vocab_size}, T);
  ops::linear_forward(norm, model_.lm_head_->compute, Tensor(), logits);
  for (int64_t slot : slots) ++lengths_[size_t(slot)];
  return logits.to(Device::cpu());
}

}  // namespace hone
