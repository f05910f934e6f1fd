#pragma once
// LoRA adapters in PEFT's form: adapter_config.json and adapter_model.safetensors
// with PEFT's tensor names ("base_model.model.model.layers.0.self_attn.q_proj.
// lora_A.weight"), which peft.PeftModel.from_pretrained loads onto the Hugging
// Face base model.
#include <optional>
#include <string>

#include "hone/io/checkpoint.hpp"
#include "hone/io/weights.hpp"
#include "hone/model/transformer.hpp"

namespace hone {

// Writes the adapters of `model` (built with LoRA) to the folder `dir`, which
// must not exist or be empty. `base_model` is recorded as base_model_name_or_path.
// Adapters PEFT cannot express are an error: one on part of a tensor that
// Hugging Face stores fused (GPT-2's c_attn: q, k and v adapters each with its A).
void export_peft(const Transformer& model, const std::string& dir, const std::string& base_model);
// The same from a LoRA run's checkpoint folder (its adapter file, read a tensor
// at a time), trained with `lora` on a model of `config`.
void export_peft(const std::string& checkpoint, const ModelConfig& config, const LoraConfig& lora,
                 const std::string& dir, const std::string& base_model);
// What export_peft would refuse (a folder in the way, adapters PEFT cannot
// hold), checked before a run trains the adapters it exports.
void check_peft_export(const ModelConfig& config, const LoraConfig& lora, const std::string& dir);

// Whether `dir` is a PEFT adapter folder (it holds adapter_config.json).
bool is_peft_folder(const std::string& dir);

// The LoRA settings of a PEFT adapter folder (peft's save_pretrained: adapter_config.json
// and adapter_model.safetensors or .bin) for a base model of `config`: its rank,
// alpha (use_rslora's alpha/sqrt(r) scale given as hone's alpha/rank), dropout,
// and the modules its tensors adapt. Adapters hone cannot hold are errors naming
// what: DoRA, rank or alpha patterns, biases, modules_to_save, adapters on some
// layers only, on some MLP projections only, or on tensors Hugging Face stores
// fused (GPT-2's c_attn, MPT's Wqkv).
LoraConfig read_peft_config(const std::string& dir, const ModelConfig& config);

// LoRA adapters kept apart from their base model, for a base of `base` whose
// weights `weights` reads: a PEFT folder, or a lora_finetune checkpoint folder
// or run directory (trained on a model of that shape, else an error). Adapters
// already merged into `weights` (a LoRA run's checkpoint holds its own) are an
// error: they would be added twice. A LoRA run's adapters put on another model
// than the one they were trained on (`base_path` names it: another step of the
// pretraining run the adapters' run named by its directory) come with a note
// (`base_path` empty: weights from no folder, nothing to compare).
struct LoraAdapters {
  LoraConfig lora;
  AdapterReader read;                    // each adapter by hone name, as f32
  std::string folder;                    // the PEFT or checkpoint folder
  std::string description;               // "the PEFT adapters of DIR"
  std::optional<std::string> tokenizer;  // a LoRA run's tokenizer.path
  std::vector<std::string> notes;        // for the user (printed after "note: ")
};
LoraAdapters open_lora_adapters(const std::string& path, const std::string& base_path, const ModelConfig& base,
                                const WeightSource& weights);

}  // namespace hone
