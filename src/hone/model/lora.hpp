#pragma once
// LoRA (Hu et al. 2021): a frozen weight W gets a trainable low-rank update,
// y = x·Wᵀ + (alpha/rank)·dropout(x)·Aᵀ·Bᵀ, with A [rank, in] and B [out, rank],
// B starting at zero. Module names are torchtune's: q_proj, k_proj, v_proj and
// output_proj in attention; gate_proj, up_proj, down_proj in the MLP (up_proj and
// down_proj for GELU MLPs); the output projection.
//
// DoRA (Liu et al. 2024, `use_dora`, as torchtune's and PEFT's): each adapted
// block also learns a magnitude per output row, m [rows], starting at the base
// rows' norms, and its output is y = (m / ‖W + s·B·A‖) ⊙ (x·Wᵀ + s·dropout(x)·Aᵀ·Bᵀ)
// (+ the bias, not rescaled), the row norms held constant in backward (the
// paper's section 4.3). With dropout this is torchtune's form: PEFT's passes
// the dropped input to the rescaled base product too.
#include <optional>
#include <string>
#include <vector>

#include "hone/core/tensor.hpp"
#include "hone/model/activations.hpp"
#include "hone/model/config.hpp"

namespace hone {

struct LoraConfig {
  int64_t rank = 8;
  double alpha = 16.0;
  double dropout = 0.0;
  std::vector<std::string> attn_modules = {"q_proj", "v_proj"};
  bool apply_to_mlp = false;
  bool apply_to_output = false;
  bool use_dora = false;
  double scale() const { return alpha / double(rank); }
};

// The attention module names LoRA accepts.
const std::vector<std::string>& lora_attn_module_names();

// One adapter: which module, on which hone parameter, over which rows of it.
struct LoraTarget {
  std::string module;  // q_proj, k_proj, v_proj, output_proj, gate_proj, up_proj, down_proj, output
  int64_t layer = -1;  // -1: the output projection
  std::string base;    // the hone parameter name: "layers.3.attn.qkv.weight"
  int64_t row_begin = 0, rows = 0, in = 0;
  // Under tensor parallelism the base weight is split by its output rows (q, k,
  // v, gate and up: B [rows, rank] is split with them), by its input columns
  // (output_proj, down_proj: A [rank, in] is split), or, the output projection,
  // by its vocabulary rows where tp splits the vocabulary (else it is whole).
  enum class Split { rows, columns, vocabulary } split = Split::rows;
  bool splits_rows(int64_t tp) const {
    return tp > 1 && (split == Split::rows || (split == Split::vocabulary && splits_vocabulary(rows, tp)));
  }
  bool splits_columns(int64_t tp) const { return tp > 1 && split == Split::columns; }
  bool in_mlp() const { return module == "gate_proj" || module == "up_proj" || module == "down_proj"; }
  // This rank's share of a tp-way split model: B's rows (and where they begin in
  // the rank's part of the base weight), A's input columns.
  int64_t rows_per_rank(int64_t tp) const { return splits_rows(tp) ? rows / tp : rows; }
  int64_t row_begin_per_rank(int64_t tp) const { return splits_rows(tp) ? row_begin / tp : row_begin; }
  int64_t in_per_rank(int64_t tp) const { return splits_columns(tp) ? in / tp : in; }
  // The adapter's parameter names: "layers.3.lora.q_proj.a", "lora.output.b".
  std::string a_name() const { return prefix() + module + ".a"; }
  std::string b_name() const { return prefix() + module + ".b"; }
  std::string magnitude_name() const { return prefix() + module + ".magnitude"; }  // DoRA's m

 private:
  std::string prefix() const { return layer < 0 ? "lora." : "layers." + std::to_string(layer) + ".lora."; }
};

// Throws hone::Error for settings no model takes (rank, dropout, module names;
// Hugging Face's names for torchtune's are named as such).
void check_lora_config(const LoraConfig& lora);
// The adapters `lora` puts on a model of `config`, in declaration order; throws
// hone::Error for settings the model cannot take.
std::vector<LoraTarget> lora_targets(const ModelConfig& config, const LoraConfig& lora);
// Adapter elements per rank of a tp-way tensor-parallel model (tp 1: all of them).
int64_t lora_parameter_count(const ModelConfig& config, const LoraConfig& lora, int64_t tp = 1);

// Bytes the adapters use beyond the model's planned activations, for batch x
// seq tokens: each adapter's x·Aᵀ ([rows, rank], kept for backward), and for a
// moment the largest adapter's [rows, out] product with its [rows, rank]
// gradient (and, with dropout, the dropped input and its gradient). DoRA's
// adapters also keep their block of the output before rescaling ([rows, out]),
// and for a moment the projection's output gradient rescaled (a copy: the
// residual path reads the original again). The output
// projection's adapters see the head's chunks of rows, the MLP's those of the
// MLP (activations.hpp).
size_t lora_activation_bytes(const ModelConfig& config, const LoraConfig& lora, DType dtype, int64_t batch,
                             int64_t seq, const ActivationOptions& options);

// Training FLOPs per token, PaLM's count (ModelConfig::training_flops_per_token)
// for a model trained whole, or with these adapters on a frozen base: then the
// frozen weights take part in the forward pass and the input gradients only
// (4·N, no weight gradients), attention in all three products (12·L·H·Q·T),
// each adapter element in 6.
double training_flops_per_token(const ModelConfig& config, const std::optional<LoraConfig>& lora, int64_t seq_len);

// Rows [row_begin, row_begin + rows) of a weight [out, in] (or of the part of
// it a rank holds), as [rows, in]: the block an adapter adapts.
Tensor weight_rows(const Tensor& weight, int64_t row_begin, int64_t rows);
// Folds one adapter into its base weight: the block becomes W + scale · B·A,
// and with DoRA's magnitudes (defined) each row of that is rescaled to its m.
// A bf16 weight gets the fp32 result rounded once.
void merge_adapter(const Tensor& weight, int64_t row_begin, int64_t rows, const Tensor& a, const Tensor& b,
                   double scale, const Tensor& magnitude = Tensor());

}  // namespace hone
