// config.json <-> ModelConfig for the families transformers names llama,
// mistral, gpt2 and mpt. Options that change the computation and that hone does
// not implement are errors, not silently dropped.
#include <cmath>

#include "hone/core/error.hpp"
#include "hone/io/hf.hpp"
#include "hone/io/json_file.hpp"

namespace hone {

namespace {

// The version of transformers whose config format the export follows.
constexpr const char* kTransformersVersion = "4.44.2";

void require(bool ok, const JsonFields& f, const std::string& what) {
  HONE_CHECK(ok, "{}: {} is not supported by hone", f.context(), what);
}

// A size (of the vocabulary, a layer, ...): positive and below 2^31, as every
// real model's is, so that products of sizes cannot overflow.
int64_t size(const JsonFields& f, const std::string& key) {
  const int64_t v = f.integer(key);
  HONE_CHECK(v > 0 && v < (int64_t(1) << 31), "{}: '{}' must be a positive size, got {}", f.context(), key, v);
  return v;
}

int64_t size(const JsonFields& f, const std::string& key, int64_t fallback) {
  return f.has(key) ? size(f, key) : fallback;
}

ModelConfig llama_from(const JsonFields& f, const std::string& model_type, std::vector<std::string>& notes) {
  ModelConfig c;
  c.family = Family::llama;
  c.vocab_size = size(f, "vocab_size");
  c.dim = size(f, "hidden_size");
  c.ffn_dim = size(f, "intermediate_size");
  c.n_layers = size(f, "num_hidden_layers");
  c.n_heads = size(f, "num_attention_heads");
  c.n_kv_heads = size(f, "num_key_value_heads", c.n_heads);
  c.max_seq_len = size(f, "max_position_embeddings");
  c.norm = NormKind::rmsnorm;
  c.norm_eps = f.number("rms_norm_eps", 1e-6);  // LlamaConfig's and MistralConfig's default
  c.position = PositionKind::rope;
  c.mlp = MlpKind::swiglu;
  c.tie_embeddings = f.boolean("tie_word_embeddings", false);
  c.init_std = f.number("initializer_range", 0.02);
  const std::string act = f.string("hidden_act", "silu");
  require(act == "silu", f, fmt::format("hidden_act '{}' (SwiGLU needs silu)", act));
  require(!f.boolean("attention_bias", false), f, "attention_bias: true");
  require(!f.boolean("mlp_bias", false), f, "mlp_bias: true");
  if (f.has("head_dim")) {
    require(c.dim % c.n_heads == 0 && f.integer("head_dim") == c.dim / c.n_heads, f,
            fmt::format("head_dim {} other than hidden_size / num_attention_heads", f.integer("head_dim")));
  }
  // transformers 5 writes rope_theta and the scaling together as rope_parameters;
  // 4.x wrote rope_theta and rope_scaling.
  const bool v5_rope = f.has("rope_parameters");
  const JsonFields rope = v5_rope ? f.object("rope_parameters") : f;
  c.rope_theta = rope.number("rope_theta", 10000.0);
  if (v5_rope || f.has("rope_scaling")) {
    const JsonFields s = v5_rope ? rope : f.object("rope_scaling");
    const std::string type = s.string("rope_type", s.string("type", "default"));
    if (type == "llama3") {
      c.rope_scaling.factor = s.number("factor");
      c.rope_scaling.low_freq_factor = s.number("low_freq_factor");
      c.rope_scaling.high_freq_factor = s.number("high_freq_factor");
      c.rope_scaling.original_max_position = s.integer("original_max_position_embeddings");
    } else {
      require(type == "default", s, fmt::format("rope type '{}' (hone implements llama3 scaling)", type));
    }
  }
  if (model_type == "mistral" && f.has("sliding_window") && size(f, "sliding_window") < c.max_seq_len) {
    // Full causal attention equals sliding-window attention up to the window.
    notes.push_back(fmt::format("sliding_window {}: max_seq_len limited to it (hone attends to all earlier "
                                "positions, which equals Mistral's attention only within the window)",
                                size(f, "sliding_window")));
    c.max_seq_len = size(f, "sliding_window");
  }
  return c;
}

ModelConfig gpt2_from(const JsonFields& f) {
  ModelConfig c;
  c.family = Family::gpt2;
  c.vocab_size = size(f, "vocab_size");
  c.dim = size(f, "n_embd");
  c.n_layers = size(f, "n_layer");
  c.n_heads = size(f, "n_head");
  c.n_kv_heads = c.n_heads;
  c.ffn_dim = size(f, "n_inner", 4 * c.dim);
  c.max_seq_len = f.has("n_positions") ? size(f, "n_positions") : size(f, "n_ctx");
  c.norm = NormKind::layernorm;
  c.norm_bias = true;
  c.norm_eps = f.number("layer_norm_epsilon", 1e-5);
  c.position = PositionKind::learned;
  c.linear_bias = true;
  c.tie_embeddings = f.boolean("tie_word_embeddings", true);
  c.init_std = f.number("initializer_range", 0.02);
  const std::string act = f.string("activation_function", "gelu_new");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") {
    c.mlp = MlpKind::gelu_tanh;
  } else {
    require(act == "gelu", f, fmt::format("activation_function '{}' (hone has gelu and gelu_new)", act));
    c.mlp = MlpKind::gelu;
  }
  require(f.boolean("scale_attn_weights", true), f, "scale_attn_weights: false");
  require(!f.boolean("scale_attn_by_inverse_layer_idx", false), f, "scale_attn_by_inverse_layer_idx: true");
  require(!f.boolean("add_cross_attention", false), f, "add_cross_attention: true");
  return c;
}

ModelConfig mpt_from(const JsonFields& f) {
  ModelConfig c;
  c.family = Family::mpt;
  c.vocab_size = size(f, "vocab_size");
  c.dim = size(f, "d_model");
  c.n_layers = size(f, "n_layers");
  c.n_heads = size(f, "n_heads");
  c.n_kv_heads = c.n_heads;
  // LLM Foundry's MPTMLP: int(d_model * expansion_ratio) hidden units.
  const double ffn = std::floor(double(c.dim) * f.number("expansion_ratio", 4.0));
  HONE_CHECK(ffn >= 1 && ffn < double(int64_t(1) << 31), "{}: d_model · expansion_ratio must be a positive size",
             f.context());
  c.ffn_dim = int64_t(ffn);
  c.max_seq_len = size(f, "max_seq_len");
  c.norm = NormKind::layernorm;
  const std::string norm = f.string("norm_type", "low_precision_layernorm");
  require(norm == "low_precision_layernorm" || norm == "layernorm", f, fmt::format("norm_type '{}'", norm));
  c.norm_eps = f.number("layer_norm_epsilon", 1e-5);
  c.linear_bias = c.norm_bias = !f.boolean("no_bias", true);
  c.mlp = MlpKind::gelu;
  c.tie_embeddings = true;
  c.init_std = f.number("initializer_range", 0.02);
  require(f.boolean("tie_word_embeddings", true), f, "tie_word_embeddings: false");
  require(!f.has("logit_scale"), f, "logit_scale");
  require(f.number("embedding_fraction", 1.0) == 1.0, f, "embedding_fraction below 1");
  if (f.has("ffn_config")) {
    const JsonFields ffn_config = f.object("ffn_config");
    const std::string type = ffn_config.string("ffn_type", "mptmlp");
    require(type == "mptmlp", ffn_config, fmt::format("ffn_type '{}'", type));
    require(!ffn_config.has("ffn_act_fn"), ffn_config, "ffn_act_fn");
    // LLM Foundry's MPTMLP takes ffn_hidden_size over expansion_ratio.
    if (ffn_config.has("ffn_hidden_size")) c.ffn_dim = size(ffn_config, "ffn_hidden_size");
  }
  bool alibi = false;
  if (f.has("attn_config")) {
    const JsonFields a = f.object("attn_config");
    alibi = a.boolean("alibi", false);
    c.alibi_bias_max = a.number("alibi_bias_max", 8.0);
    const std::string type = a.string("attn_type", "multihead_attention");
    if (type == "grouped_query_attention") {
      c.n_kv_heads = size(a, "kv_n_heads");
    } else if (type == "multiquery_attention") {
      c.n_kv_heads = 1;
    } else {
      require(type == "multihead_attention", a, fmt::format("attn_type '{}'", type));
    }
    require(!a.boolean("qk_ln", false), a, "qk_ln: true");
    require(!a.has("clip_qkv"), a, "clip_qkv");
    require(!a.has("softmax_scale"), a, "softmax_scale");
    require(!a.boolean("rope", false), a, "rope: true");
    // LLM Foundry's default -1 (or null) is no window.
    require(a.number("sliding_window_size", -1) == -1, a, "sliding_window_size (attention within a window)");
  }
  // LLM Foundry's MPT has learned positions where it has no ALiBi.
  c.position = alibi ? PositionKind::alibi : PositionKind::learned;
  return c;
}

}  // namespace

HfConfig hf_config_from_json(const Json& j, const std::string& path, const std::string& name) {
  const JsonFields f(j, path);
  HfConfig hf;
  hf.model_type = f.string("model_type");
  if (hf.model_type == "llama" || hf.model_type == "mistral") {
    hf.config = llama_from(f, hf.model_type, hf.notes);
  } else if (hf.model_type == "gpt2") {
    hf.config = gpt2_from(f);
  } else if (hf.model_type == "mpt") {
    hf.config = mpt_from(f);
  } else {
    fail("{}: unsupported model_type '{}': hone converts llama, mistral, gpt2 and mpt", path, hf.model_type);
  }
  hf.config.name = name;
  try {
    hf.config.validate();
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
  return hf;
}

std::string hf_torch_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return "float32";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    default: fail("Hugging Face checkpoints hold fp32, bf16 or fp16 weights, not {}", dtype_name(dtype));
  }
}

Json hf_config_to_json(const ModelConfig& c, DType dtype) {
  auto expect = [&](bool ok, const char* architecture, const std::string& what) {
    HONE_CHECK(ok, "model '{}' cannot be written as transformers' {}: {}", c.name, architecture, what);
  };
  Json j;
  switch (c.family) {
    case Family::llama: {
      const char* arch = "LlamaForCausalLM";
      expect(c.norm == NormKind::rmsnorm && !c.norm_bias, arch, "it needs RMSNorm without bias");
      expect(c.position == PositionKind::rope, arch, "it needs RoPE positions");
      expect(c.mlp == MlpKind::swiglu, arch, "it needs a SwiGLU MLP");
      expect(!c.linear_bias, arch, "it has no projection biases");
      j = {{"architectures", {arch}},
           {"model_type", "llama"},
           {"vocab_size", c.vocab_size},
           {"hidden_size", c.dim},
           {"intermediate_size", c.ffn_dim},
           {"num_hidden_layers", c.n_layers},
           {"num_attention_heads", c.n_heads},
           {"num_key_value_heads", c.n_kv_heads},
           {"head_dim", c.head_dim()},
           {"max_position_embeddings", c.max_seq_len},
           {"hidden_act", "silu"},
           {"rms_norm_eps", c.norm_eps},
           {"rope_theta", c.rope_theta},
           {"rope_scaling", nullptr},
           {"attention_bias", false},
           {"attention_dropout", 0.0},
           {"mlp_bias", false},
           {"pretraining_tp", 1},
           {"tie_word_embeddings", c.tie_embeddings},
           {"initializer_range", c.init_std},
           {"use_cache", true}};
      if (c.rope_scaling.enabled()) {
        j["rope_scaling"] = {{"rope_type", "llama3"},
                             {"factor", c.rope_scaling.factor},
                             {"low_freq_factor", c.rope_scaling.low_freq_factor},
                             {"high_freq_factor", c.rope_scaling.high_freq_factor},
                             {"original_max_position_embeddings", c.rope_scaling.original_max_position}};
      }
      break;
    }
    case Family::gpt2: {
      const char* arch = "GPT2LMHeadModel";
      expect(c.norm == NormKind::layernorm, arch, "it needs LayerNorm");  // export_hf writes missing biases as zeros
      expect(c.position == PositionKind::learned, arch, "it needs learned positions");
      expect(c.mlp != MlpKind::swiglu, arch, "it needs a GELU MLP");
      expect(c.n_kv_heads == c.n_heads, arch, "it has no grouped-query attention");
      j = {{"architectures", {arch}},
           {"model_type", "gpt2"},
           {"vocab_size", c.vocab_size},
           {"n_embd", c.dim},
           {"n_layer", c.n_layers},
           {"n_head", c.n_heads},
           {"n_inner", c.ffn_dim},
           {"n_positions", c.max_seq_len},
           {"n_ctx", c.max_seq_len},
           {"activation_function", c.mlp == MlpKind::gelu_tanh ? "gelu_new" : "gelu"},
           {"layer_norm_epsilon", c.norm_eps},
           {"attn_pdrop", 0.0},
           {"embd_pdrop", 0.0},
           {"resid_pdrop", 0.0},
           {"scale_attn_weights", true},
           {"scale_attn_by_inverse_layer_idx", false},
           {"reorder_and_upcast_attn", false},
           {"tie_word_embeddings", c.tie_embeddings},
           {"initializer_range", c.init_std},
           {"use_cache", true}};
      break;
    }
    case Family::mpt: {
      const char* arch = "MptForCausalLM";
      // transformers' class drops biases, always applies ALiBi with its
      // default slopes, and builds its layers as MPT-7B's: as many key and value
      // heads as query heads, an MLP 4 x d_model wide, whatever config.json says
      // (LLM Foundry's own code has all of these, and hone reads such checkpoints).
      expect(c.norm == NormKind::layernorm && !c.norm_bias && !c.linear_bias, arch,
             "it needs LayerNorm and projections without biases");
      expect(c.position == PositionKind::alibi, arch, "it needs ALiBi positions");
      expect(c.alibi_bias_max == 8.0, arch, "it applies ALiBi with alibi_bias_max 8");
      expect(c.mlp == MlpKind::gelu, arch, "it needs an exact-GELU MLP");
      expect(c.tie_embeddings, arch, "its output projection is tied to the embedding");
      expect(c.n_kv_heads == c.n_heads, arch, "it has no grouped-query attention");
      expect(c.ffn_dim == 4 * c.dim, arch,
             fmt::format("it builds its MLP 4 x d_model wide (expansion_ratio 4), and this model's is {} for d_model {}",
                         c.ffn_dim, c.dim));
      Json attn = {{"attn_type", "multihead_attention"},
                   {"alibi", true},
                   {"alibi_bias_max", c.alibi_bias_max},
                   {"attn_impl", "torch"},
                   {"attn_pdrop", 0.0},
                   {"clip_qkv", nullptr},
                   {"qk_ln", false},
                   {"softmax_scale", nullptr},
                   {"prefix_lm", false}};
      j = {{"architectures", {arch}},
           {"model_type", "mpt"},
           {"vocab_size", c.vocab_size},
           {"d_model", c.dim},
           {"n_layers", c.n_layers},
           {"n_heads", c.n_heads},
           {"expansion_ratio", 4},
           {"max_seq_len", c.max_seq_len},
           {"no_bias", true},
           {"norm_type", "low_precision_layernorm"},
           {"layer_norm_epsilon", c.norm_eps},
           {"learned_pos_emb", false},
           {"attn_config", attn},
           {"emb_pdrop", 0.0},
           {"resid_pdrop", 0.0},
           {"logit_scale", nullptr},
           {"tie_word_embeddings", true},
           {"initializer_range", c.init_std},
           {"use_cache", true}};
      break;
    }
  }
  j["torch_dtype"] = hf_torch_dtype(dtype);
  j["transformers_version"] = kTransformersVersion;
  return j;
}

}  // namespace hone
