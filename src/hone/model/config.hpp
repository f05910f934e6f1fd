#pragma once
// ModelConfig: one decoder-only Transformer, parameterised to be Llama 2/3/3.1/3.2,
// GPT-2 or MPT. Named presets range from test sizes to 70B (the large ones are
// configs only: the memory planner says up front whether a run fits).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hone {

enum class Family { llama, gpt2, mpt };
enum class NormKind { rmsnorm, layernorm };
enum class PositionKind { rope, learned, alibi };
enum class MlpKind { swiglu, gelu, gelu_tanh };

// Llama 3.1's stretch of the low RoPE frequencies to longer contexts.
struct RopeScaling {
  double factor = 1.0;  // 1 = no scaling
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
  bool enabled() const { return factor != 1.0; }
};

// Whether tensor parallelism over tp ranks splits a vocabulary of vocab_size
// (ModelConfig::splits_vocabulary).
inline bool splits_vocabulary(int64_t vocab_size, int64_t tp) { return tp > 1 && vocab_size % tp == 0; }

struct ModelConfig {
  std::string name = "custom";
  Family family = Family::llama;
  int64_t vocab_size = 0;
  int64_t dim = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // < n_heads: grouped-query attention
  int64_t ffn_dim = 0;     // hidden width of the MLP
  int64_t max_seq_len = 0;
  NormKind norm = NormKind::rmsnorm;
  bool norm_bias = false;
  double norm_eps = 1e-5;
  PositionKind position = PositionKind::rope;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  double alibi_bias_max = 8.0;
  MlpKind mlp = MlpKind::swiglu;
  bool linear_bias = false;  // biases on the attention and MLP projections (GPT-2)
  bool tie_embeddings = false;
  double init_std = 0.02;

  int64_t head_dim() const { return dim / n_heads; }
  int64_t qkv_dim() const { return (n_heads + 2 * n_kv_heads) * head_dim(); }
  // Output width of the MLP's first projection: gate and up for SwiGLU.
  int64_t mlp_up_dim() const { return mlp == MlpKind::swiglu ? 2 * ffn_dim : ffn_dim; }

  // Throws hone::Error naming the first inconsistent field.
  void validate() const;
  int64_t num_params() const;
  // Tensor parallelism over tp ranks splits every attention and MLP projection
  // (and the column-parallel biases) and, when tp divides vocab_size, the token
  // embeddings and the output projection by vocabulary rows (Megatron's
  // vocab-parallel embedding and cross-entropy; otherwise every rank holds them
  // whole). One rank holds its part of the split parameters, all of the rest.
  bool splits_vocabulary(int64_t tp) const { return hone::splits_vocabulary(vocab_size, tp); }
  // Throws hone::Error unless tp ranks can split the heads, key/value heads and ffn_dim.
  void check_tensor_parallel(int64_t tp) const;
  int64_t num_projection_weights() const;  // every layer's projection matrices
  int64_t num_projection_params() const;   // those and the column-parallel biases
  int64_t num_vocabulary_params() const;  // token embeddings and an untied output projection
  int64_t num_split_params(int tp) const;
  int64_t num_params_per_rank(int tp) const;
  // Parameters outside the embedding tables and the output projection.
  int64_t num_non_embedding_params() const;
  // Weights that take part in a matrix product per token: everything but the
  // input embedding tables, with the output projection counted once even when
  // tied (as Megatron, LLM Foundry, nanoGPT and llm.c count; torchtitan leaves
  // a tied head out with the embeddings). The N of the FLOP count.
  int64_t num_matmul_params() const { return num_non_embedding_params() + vocab_size * dim; }
  // Training FLOPs per token, PaLM's count: 6·N + 12·L·H·Q·T (N = num_matmul_params,
  // H heads of Q dimensions, T = seq_len; the attention term for full, non-causal
  // attention as PaLM states it).
  double training_flops_per_token(int64_t seq_len) const;
};

std::string_view family_name(Family family);
std::string_view norm_name(NormKind norm);
std::string_view position_name(PositionKind position);
std::string_view mlp_name(MlpKind mlp);

// Built-in model sizes by name (llama_tiny, llama_125M, gpt2_124M, llama3_1_8B, ...).
ModelConfig model_preset(std::string_view name);
std::vector<std::string> model_preset_names();

}  // namespace hone
