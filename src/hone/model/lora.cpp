#include "hone/model/lora.hpp"

#include <algorithm>
#include <map>

#include "hone/core/error.hpp"
#include "hone/ops/ops.hpp"

namespace hone {

const std::vector<std::string>& lora_attn_module_names() {
  static const std::vector<std::string> names = {"q_proj", "k_proj", "v_proj", "output_proj"};
  return names;
}

void check_lora_config(const LoraConfig& lora) {
  HONE_CHECK(lora.rank > 0, "lora_rank must be positive, got {}", lora.rank);
  HONE_CHECK(lora.dropout >= 0 && lora.dropout < 1, "lora_dropout must be in [0, 1), got {}", lora.dropout);
  // PEFT's target_modules name Hugging Face's modules; torchtune's keys (hone's) name its own.
  static const std::map<std::string, std::string> hugging_face = {
      {"o_proj", "output_proj"}, {"c_attn", "q_proj, k_proj, v_proj"}, {"c_proj", "output_proj"},
      {"gate_proj", "apply_lora_to_mlp: true"}, {"up_proj", "apply_lora_to_mlp: true"},
      {"down_proj", "apply_lora_to_mlp: true"}, {"lm_head", "apply_lora_to_output: true"}};
  for (const std::string& m : lora.attn_modules) {
    const auto& known = lora_attn_module_names();
    if (std::find(known.begin(), known.end(), m) != known.end()) continue;
    const auto peft = hugging_face.find(m);
    HONE_CHECK(peft == hugging_face.end(),
               "lora_attn_modules: '{}' is a Hugging Face module name (PEFT's target_modules); hone takes torchtune's: "
               "{} instead",
               m, peft->second);
    fail("lora_attn_modules: unknown module '{}'; expected q_proj, k_proj, v_proj or output_proj", m);
  }
  HONE_CHECK(!lora.attn_modules.empty() || lora.apply_to_mlp || lora.apply_to_output,
             "lora_attn_modules is empty and apply_lora_to_mlp and apply_lora_to_output are false: the adapters "
             "would adapt nothing, and the run train nothing");
}

std::vector<LoraTarget> lora_targets(const ModelConfig& c, const LoraConfig& lora) {
  check_lora_config(lora);
  HONE_CHECK(!lora.apply_to_output || !c.tie_embeddings,
             "apply_lora_to_output needs an untied output projection; {} ties it to the token embedding", c.name);
  auto wants = [&](const char* module) {
    return std::find(lora.attn_modules.begin(), lora.attn_modules.end(), module) != lora.attn_modules.end();
  };
  const int64_t q = c.n_heads * c.head_dim(), kv = c.n_kv_heads * c.head_dim();
  using enum LoraTarget::Split;
  std::vector<LoraTarget> targets;
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string layer = "layers." + std::to_string(i) + ".";
    const std::string qkv = layer + "attn.qkv.weight", up = layer + "mlp.up.weight";
    if (wants("q_proj")) targets.push_back({"q_proj", i, qkv, 0, q, c.dim, rows});
    if (wants("k_proj")) targets.push_back({"k_proj", i, qkv, q, kv, c.dim, rows});
    if (wants("v_proj")) targets.push_back({"v_proj", i, qkv, q + kv, kv, c.dim, rows});
    if (wants("output_proj")) targets.push_back({"output_proj", i, layer + "attn.out.weight", 0, c.dim, q, columns});
    if (lora.apply_to_mlp) {
      if (c.mlp == MlpKind::swiglu) {
        targets.push_back({"gate_proj", i, up, 0, c.ffn_dim, c.dim, rows});
        targets.push_back({"up_proj", i, up, c.ffn_dim, c.ffn_dim, c.dim, rows});
      } else {
        targets.push_back({"up_proj", i, up, 0, c.ffn_dim, c.dim, rows});
      }
      targets.push_back({"down_proj", i, layer + "mlp.down.weight", 0, c.dim, c.ffn_dim, columns});
    }
  }
  if (lora.apply_to_output) targets.push_back({"output", -1, "lm_head.weight", 0, c.vocab_size, c.dim, vocabulary});
  return targets;
}

int64_t lora_parameter_count(const ModelConfig& config, const LoraConfig& lora, int64_t tp) {
  int64_t n = 0;
  for (const LoraTarget& t : lora_targets(config, lora)) {
    n += lora.rank * (t.in_per_rank(tp) + t.rows_per_rank(tp)) + (lora.use_dora ? t.rows_per_rank(tp) : 0);
  }
  return n;
}

namespace {

// The output width of the projection a target adapts (DoRA copies its gradient).
int64_t projection_width(const ModelConfig& c, const LoraTarget& t) {
  if (t.module == "output") return c.vocab_size;
  if (t.module == "output_proj" || t.module == "down_proj") return c.dim;
  if (t.in_mlp()) return c.mlp == MlpKind::swiglu ? 2 * c.ffn_dim : c.ffn_dim;
  return (c.n_heads + 2 * c.n_kv_heads) * c.head_dim();
}

}  // namespace

size_t lora_activation_bytes(const ModelConfig& config, const LoraConfig& lora, DType dtype, int64_t batch,
                             int64_t seq, const ActivationOptions& options) {
  const int64_t tp = options.tp, rows = batch * seq;
  const int64_t head_rows = logits_chunk_rows(config, dtype, batch, seq, options);
  const int64_t mlp_rows = mlp_chunk_rows(config, dtype, batch, seq, options);
  const auto size = int64_t(dtype_size(dtype));
  int64_t kept = 0, moment = 0;  // bytes
  std::map<int64_t, int64_t> unit_extra;  // DoRA: by layer (-1: the head), see below
  for (const LoraTarget& t : lora_targets(config, lora)) {
    const int64_t out = t.rows_per_rank(tp), in = t.in_per_rank(tp);
    // The output head, and the MLP under checkpointing, run over chunks of rows.
    const int64_t n = t.layer < 0 ? head_rows : t.in_mlp() && tp == 1 ? mlp_rows : rows;
    const int64_t adapter = n * (out + lora.rank + (lora.dropout > 0 ? 2 * in : 0)) * size;
    kept += n * lora.rank * size;
    if (!lora.use_dora) {
      moment = std::max(moment, adapter);
      continue;
    }
    // Its block's output is kept: of rows run in chunks, the last chunk's, and
    // a whole chunk's while its layer runs again in backward.
    const int64_t last = rows - (rows - 1) / n * n;
    kept += last * out * size;
    unit_extra[t.layer] += (n - last) * out * size;
    moment = std::max(moment, n * projection_width(config, t) * size + adapter);
  }
  int64_t extra = 0;
  for (const auto& [unit, bytes] : unit_extra) extra = std::max(extra, bytes);
  return size_t(kept + extra + moment);
}

double training_flops_per_token(const ModelConfig& config, const std::optional<LoraConfig>& lora, int64_t seq_len) {
  const double whole = config.training_flops_per_token(seq_len);
  if (!lora) return whole;
  return whole - 2.0 * double(config.num_matmul_params()) + 6.0 * double(lora_parameter_count(config, *lora));
}

Tensor weight_rows(const Tensor& weight, int64_t row_begin, int64_t rows) {
  const int64_t in = weight.numel() / weight.size(0);
  return weight.view({weight.numel()}).slice(row_begin * in, {rows, in});
}

namespace {

// The adapted block W[row_begin, row_begin + rows) + scale · B·A of a weight
// [out, in] (or the part of it a rank holds, with A [rank, in] and B [rows,
// rank] to match), in the adapters' dtype (f32, or f64).
Tensor merged_block(const Tensor& weight, int64_t row_begin, int64_t rows, const Tensor& a, const Tensor& b,
                    double scale) {
  const Tensor block = weight_rows(weight, row_begin, rows);
  const Tensor sum = block.dtype() == a.dtype() ? block.clone() : ops::cast_to(block, a.dtype());
  const int64_t in = block.size(1), rank = a.size(0);
  ops::matmul(b.view({1, rows, rank}), false, a.view({1, rank, in}), false, sum.view({1, rows, in}), float(scale),
              1.0f);
  return sum;
}

}  // namespace

void merge_adapter(const Tensor& weight, int64_t row_begin, int64_t rows, const Tensor& a, const Tensor& b,
                   double scale, const Tensor& magnitude) {
  const Tensor merged = merged_block(weight, row_begin, rows, a, b, scale);
  if (magnitude.defined()) {  // DoRA: each row rescaled to its magnitude
    const Tensor factor = Tensor::empty({rows}, merged.dtype(), merged.device());
    const Tensor inv_norm = Tensor::empty({rows}, merged.dtype(), merged.device());
    // The norms of the merged rows themselves: s·B·A is in them already (scale 0 adds nothing).
    ops::dora_norms(merged, a, b, 0.0, ops::cast_to(magnitude, a.dtype()), factor, inv_norm);
    ops::scale_rows(merged, factor);
  }
  // A base kept in bf16 (Transformer: LoRA's frozen base): the result in the
  // adapters' fp32, rounded once.
  ops::cast(merged, weight_rows(weight, row_begin, rows));
}

}  // namespace hone
