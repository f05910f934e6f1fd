// Built-in model sizes. Shapes follow the published Hugging Face configs of each
// model; the tiny ones exist for tests and quick experiments.
#include <functional>
#include <map>

#include "hone/core/error.hpp"
#include "hone/model/config.hpp"

namespace hone {

namespace {

ModelConfig llama(std::string name, int64_t vocab, int64_t dim, int64_t layers, int64_t heads, int64_t kv_heads,
                  int64_t ffn, int64_t max_seq, double theta) {
  ModelConfig c;
  c.name = std::move(name);
  c.family = Family::llama;
  c.vocab_size = vocab;
  c.dim = dim;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.ffn_dim = ffn;
  c.max_seq_len = max_seq;
  c.rope_theta = theta;
  return c;
}

// Llama 3.1/3.2: 128k context by stretching the low frequencies of RoPE.
ModelConfig llama3_scaled(ModelConfig c, double factor) {
  c.rope_scaling = {.factor = factor, .low_freq_factor = 1.0, .high_freq_factor = 4.0, .original_max_position = 8192};
  c.max_seq_len = 131072;
  return c;
}

ModelConfig tied(ModelConfig c) {
  c.tie_embeddings = true;
  return c;
}

ModelConfig gpt2(std::string name, int64_t vocab, int64_t dim, int64_t layers, int64_t heads, int64_t max_seq) {
  ModelConfig c;
  c.name = std::move(name);
  c.family = Family::gpt2;
  c.vocab_size = vocab;
  c.dim = dim;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = heads;
  c.ffn_dim = 4 * dim;
  c.max_seq_len = max_seq;
  c.norm = NormKind::layernorm;
  c.norm_bias = true;
  c.position = PositionKind::learned;
  c.mlp = MlpKind::gelu_tanh;
  c.linear_bias = true;
  c.tie_embeddings = true;
  return c;
}

// MPT (LLM Foundry): ALiBi, LayerNorm without bias, no biases, exact GELU, tied.
ModelConfig mpt(std::string name, int64_t vocab, int64_t dim, int64_t layers, int64_t heads, int64_t max_seq) {
  ModelConfig c;
  c.name = std::move(name);
  c.family = Family::mpt;
  c.vocab_size = vocab;
  c.dim = dim;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = heads;
  c.ffn_dim = 4 * dim;
  c.max_seq_len = max_seq;
  c.norm = NormKind::layernorm;
  c.position = PositionKind::alibi;
  c.mlp = MlpKind::gelu;
  c.tie_embeddings = true;
  return c;
}

const std::map<std::string, std::function<ModelConfig()>, std::less<>>& presets() {
  static const std::map<std::string, std::function<ModelConfig()>, std::less<>> table = {
      {"llama_tiny", [] { return llama("llama_tiny", 256, 64, 2, 4, 2, 192, 256, 10000.0); }},
      {"gpt2_tiny", [] { return gpt2("gpt2_tiny", 256, 64, 2, 4, 256); }},
      {"mpt_tiny", [] { return mpt("mpt_tiny", 256, 64, 2, 4, 256); }},
      {"llama_125M", [] { return llama("llama_125M", 32000, 768, 12, 12, 4, 2048, 2048, 10000.0); }},
      {"gpt2_124M", [] { return gpt2("gpt2_124M", 50257, 768, 12, 12, 1024); }},
      {"gpt2_355M", [] { return gpt2("gpt2_355M", 50257, 1024, 24, 16, 1024); }},
      {"gpt2_774M", [] { return gpt2("gpt2_774M", 50257, 1280, 36, 20, 1024); }},
      {"gpt2_1558M", [] { return gpt2("gpt2_1558M", 50257, 1600, 48, 25, 1024); }},
      {"mpt_125M", [] { return mpt("mpt_125M", 50368, 768, 12, 12, 2048); }},
      {"mpt_7B", [] { return mpt("mpt_7B", 50432, 4096, 32, 32, 2048); }},
      {"mpt_30B", [] { return mpt("mpt_30B", 50432, 7168, 48, 64, 8192); }},
      {"llama2_7B", [] { return llama("llama2_7B", 32000, 4096, 32, 32, 32, 11008, 4096, 10000.0); }},
      {"llama2_13B", [] { return llama("llama2_13B", 32000, 5120, 40, 40, 40, 13824, 4096, 10000.0); }},
      {"llama2_70B", [] { return llama("llama2_70B", 32000, 8192, 80, 64, 8, 28672, 4096, 10000.0); }},
      {"mistral_7B", [] { return llama("mistral_7B", 32000, 4096, 32, 32, 8, 14336, 32768, 1000000.0); }},
      {"llama3_8B", [] { return llama("llama3_8B", 128256, 4096, 32, 32, 8, 14336, 8192, 500000.0); }},
      {"llama3_70B", [] { return llama("llama3_70B", 128256, 8192, 80, 64, 8, 28672, 8192, 500000.0); }},
      {"llama3_1_8B",
       [] { return llama3_scaled(llama("llama3_1_8B", 128256, 4096, 32, 32, 8, 14336, 8192, 500000.0), 8.0); }},
      {"llama3_1_70B",
       [] { return llama3_scaled(llama("llama3_1_70B", 128256, 8192, 80, 64, 8, 28672, 8192, 500000.0), 8.0); }},
      {"llama3_2_1B",
       [] {
         return tied(llama3_scaled(llama("llama3_2_1B", 128256, 2048, 16, 32, 8, 8192, 8192, 500000.0), 32.0));
       }},
      {"llama3_2_3B",
       [] {
         return tied(llama3_scaled(llama("llama3_2_3B", 128256, 3072, 28, 24, 8, 8192, 8192, 500000.0), 32.0));
       }},
  };
  return table;
}

}  // namespace

ModelConfig model_preset(std::string_view name) {
  auto found = presets().find(name);
  if (found == presets().end()) {
    std::string names;
    for (const auto& [preset, make] : presets()) names += (names.empty() ? "" : ", ") + preset;
    fail("unknown model '{}': built-in models are {}", name, names);
  }
  return found->second();
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& [preset, make] : presets()) names.push_back(preset);
  return names;
}

}  // namespace hone
