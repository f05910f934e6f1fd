#pragma once
// LoRA (Hu et al. 2021): a frozen weight W gets a trainable low-rank update,
// y = x·Wᵀ + (alpha/rank)·dropout(x)·Aᵀ·Bᵀ, with A [rank, in] and B [out, rank],
// B starting at zero. Module names are torchtune's: q_proj, k_proj, v_proj and
// output_proj in attention; gate_proj, up_proj, down_proj in the MLP (up_proj and
// down_proj for GELU MLPs); the output projection.
#include <string>
#include <vector>

namespace hone {

struct LoraConfig {
  int64_t rank = 8;
  double alpha = 16.0;
  double dropout = 0.0;
  std::vector<std::string> attn_modules = {"q_proj", "v_proj"};
  bool apply_to_mlp = false;
  bool apply_to_output = false;
  double scale() const { return alpha / double(rank); }
};

// The attention module names LoRA accepts.
const std::vector<std::string>& lora_attn_module_names();

}  // namespace hone
