#pragma once
// Recipes: what `hone run NAME` runs. Each has a schema of the keys it accepts
// and a function that runs a resolved config; `hone validate` and `hone ls` use
// the same table.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hone/config/config.hpp"
#include "hone/model/config.hpp"
#include "hone/model/lora.hpp"
#include "hone/train/dpo.hpp"

namespace hone {

// What a training config trains in each micro-batch: the model (a fine-tuning
// config's is the one at checkpoint.path, of which only the config is read),
// the batch, the sequence length and, with LoRA, the adapters.
struct TrainingShape {
  ModelConfig model;
  int64_t batch_size = 0;
  int64_t seq_len = 0;
  std::optional<LoraConfig> lora;
};

struct Recipe {
  std::string name;
  std::string description;
  Schema schema;
  std::function<int(const Config& resolved)> run;
  // Lines `hone validate` prints about a resolved config (sizes, memory).
  std::function<std::vector<std::string>(const Config& resolved)> summarize;
  // Training recipes: the shape of a resolved config (the banner, `hone bench
  // --model CONFIG`); empty for the others.
  std::function<TrainingShape(const Config& resolved)> training_shape;
};

const std::vector<Recipe>& recipes();
// Throws hone::Error listing the recipes when `name` is not one.
const Recipe& find_recipe(const std::string& name);

// The recipe entry points.
int run_pretrain(const Config& resolved);
TrainingShape pretrain_shape(const Config& resolved);
// The banner: model, batch, memory estimate (per rank of `data_parallel_ranks`).
std::vector<std::string> summarize_training(const Config& resolved, int data_parallel_ranks = 1);
enum class FinetuneKind { full, lora, lora_dpo, full_dpo };
Schema finetune_schema(FinetuneKind kind);
// full_finetune, lora_finetune and lora_dpo: the config's model.lora_* keys
// and DPO's loss.* keys tell them apart.
int run_finetune(const Config& resolved);
// A resolved lora_dpo or full_dpo config (it has DPO's loss keys).
bool trains_preferences(const Config& resolved);
// Its loss.* keys (keys the chosen loss.type does not use are errors).
DpoConfig dpo_config_from(const Config& resolved);
std::vector<std::string> summarize_finetune(const Config& resolved);
TrainingShape finetune_shape(const Config& resolved);
Schema generate_schema();
int run_generate(const Config& resolved);
// The errors of a generate or eval config that need no file (hone validate's summary; nothing to print).
std::vector<std::string> check_generate_config(const Config& resolved);
Schema eval_schema();
int run_eval(const Config& resolved);
std::vector<std::string> check_eval_config(const Config& resolved);

}  // namespace hone
