#pragma once
// LoRA adapters in PEFT's form: adapter_config.json and adapter_model.safetensors
// with PEFT's tensor names ("base_model.model.model.layers.0.self_attn.q_proj.
// lora_A.weight"), which peft.PeftModel.from_pretrained loads onto the Hugging
// Face base model.
#include <string>

#include "hone/model/transformer.hpp"

namespace hone {

// Writes the adapters of `model` (built with LoRA) to the folder `dir`, which
// must not exist or be empty. `base_model` is recorded as base_model_name_or_path.
// Adapters PEFT cannot express are an error: one on part of a tensor that
// Hugging Face stores fused (GPT-2's c_attn), or on a transposed Conv1D weight.
void export_peft(const Transformer& model, const std::string& dir, const std::string& base_model);
// The same from a LoRA run's checkpoint folder (its adapter file, read a tensor
// at a time), trained with `lora` on a model of `config`.
void export_peft(const std::string& checkpoint, const ModelConfig& config, const LoraConfig& lora,
                 const std::string& dir, const std::string& base_model);

}  // namespace hone
