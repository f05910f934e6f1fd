#include "hone/model/config.hpp"

#include "hone/core/error.hpp"

namespace hone {

void ModelConfig::validate() const {
  auto positive = [&](const char* key, int64_t value) {
    HONE_CHECK(value > 0, "model '{}': model.{} must be positive, got {}", name, key, value);
  };
  positive("vocab_size", vocab_size);
  positive("dim", dim);
  positive("n_layers", n_layers);
  positive("n_heads", n_heads);
  positive("n_kv_heads", n_kv_heads);
  positive("ffn_dim", ffn_dim);
  positive("max_seq_len", max_seq_len);
  // Bounds well past any real model's: products of sizes then fit 64 bits, and
  // a mistyped size is an error here, not terabytes asked of memory later.
  const auto at_most = [&](const char* key, int64_t value, int64_t limit) {
    HONE_CHECK(value <= limit, "model '{}': model.{} {} is beyond {}, more than any model has", name, key, value,
               limit);
  };
  at_most("n_layers", n_layers, 4096);
  at_most("dim", dim, int64_t(1) << 18);
  at_most("ffn_dim", ffn_dim, int64_t(1) << 20);
  at_most("vocab_size", vocab_size, (int64_t(1) << 31) - 1);  // token ids are 32-bit
  at_most("max_seq_len", max_seq_len, int64_t(1) << 24);
  HONE_CHECK(dim % n_heads == 0, "model '{}': model.dim {} is not a multiple of model.n_heads {}", name, dim,
             n_heads);
  HONE_CHECK(n_heads % n_kv_heads == 0, "model '{}': model.n_heads {} is not a multiple of model.n_kv_heads {}",
             name, n_heads, n_kv_heads);
  HONE_CHECK(position != PositionKind::rope || head_dim() % 2 == 0,
             "model '{}': RoPE needs an even head dimension, got {}", name, head_dim());
  HONE_CHECK(norm_eps > 0, "model '{}': model.norm_eps must be positive", name);
  if (position != PositionKind::rope) return;
  HONE_CHECK(rope_theta > 0, "model '{}': model.rope_theta must be positive, got {}", name, rope_theta);
  // Llama 3.1's scaling as transformers checks it: a factor of at least 1 (1: none).
  HONE_CHECK(rope_scaling.factor >= 1, "model '{}': model.rope_scaling.factor must be at least 1 (1: no scaling), got {}",
             name, rope_scaling.factor);
  if (!rope_scaling.enabled()) return;
  HONE_CHECK(rope_scaling.low_freq_factor > 0, "model '{}': model.rope_scaling.low_freq_factor must be positive, got {}",
             name, rope_scaling.low_freq_factor);
  HONE_CHECK(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor,
             "model '{}': rope_scaling.high_freq_factor must exceed low_freq_factor", name);
  HONE_CHECK(rope_scaling.original_max_position > 0,
             "model '{}': model.rope_scaling.original_max_position must be positive, got {}", name,
             rope_scaling.original_max_position);
}

void ModelConfig::check_tensor_parallel(int64_t tp) const {
  HONE_CHECK(n_heads % tp == 0 && n_kv_heads % tp == 0 && ffn_dim % tp == 0,
             "model {}: tensor parallelism over {} ranks needs {} attention heads, {} key/value heads and ffn_dim {} "
             "to be multiples of {}",
             name, tp, n_heads, n_kv_heads, ffn_dim, tp);
}

int64_t ModelConfig::num_non_embedding_params() const {
  const int64_t norm_params = norm_bias ? 2 * dim : dim;
  int64_t layer = 2 * norm_params + qkv_dim() * dim + dim * dim + mlp_up_dim() * dim + ffn_dim * dim;
  if (linear_bias) layer += qkv_dim() + dim + mlp_up_dim() + dim;
  return n_layers * layer + norm_params;
}

int64_t ModelConfig::num_vocabulary_params() const { return (tie_embeddings ? 1 : 2) * vocab_size * dim; }

int64_t ModelConfig::num_params() const {
  const int64_t positions = position == PositionKind::learned ? max_seq_len * dim : 0;
  return num_non_embedding_params() + num_vocabulary_params() + positions;
}

int64_t ModelConfig::num_projection_weights() const {
  return n_layers * (qkv_dim() * dim + dim * n_heads * head_dim() + mlp_up_dim() * dim + dim * ffn_dim);
}

int64_t ModelConfig::num_projection_params() const {
  return num_projection_weights() + (linear_bias ? n_layers * (qkv_dim() + mlp_up_dim()) : 0);
}

int64_t ModelConfig::num_split_params(int tp) const {
  return num_projection_params() + (splits_vocabulary(tp) ? num_vocabulary_params() : 0);
}

int64_t ModelConfig::num_params_per_rank(int tp) const {
  return num_params() - num_split_params(tp) + num_split_params(tp) / tp;
}

double ModelConfig::training_flops_per_token(int64_t seq_len) const {
  return 6.0 * double(num_matmul_params()) + 12.0 * double(n_layers * n_heads * head_dim() * seq_len);
}

std::string_view family_name(Family family) {
  switch (family) {
    case Family::llama: return "llama";
    case Family::gpt2: return "gpt2";
    case Family::mpt: return "mpt";
  }
  HONE_ASSERT(false);
}

std::string_view norm_name(NormKind norm) { return norm == NormKind::rmsnorm ? "rmsnorm" : "layernorm"; }

std::string_view position_name(PositionKind position) {
  switch (position) {
    case PositionKind::rope: return "rope";
    case PositionKind::learned: return "learned";
    case PositionKind::alibi: return "alibi";
  }
  HONE_ASSERT(false);
}

std::string_view mlp_name(MlpKind mlp) {
  switch (mlp) {
    case MlpKind::swiglu: return "swiglu";
    case MlpKind::gelu: return "gelu";
    case MlpKind::gelu_tanh: return "gelu_tanh";
  }
  HONE_ASSERT(false);
}

}  // namespace hone
