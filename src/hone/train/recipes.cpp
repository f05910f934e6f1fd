#include "hone/train/recipes.hpp"

#include "hone/core/error.hpp"
#include "hone/train/run_config.hpp"

namespace hone {

const std::vector<Recipe>& recipes() {
  static const std::vector<Recipe> table = [] {
    std::vector<Recipe> t;
    Schema pretrain;
    pretrain.add(run_schema()).add(model_schema()).add(training_schema()).add(pretrain_dataset_schema());
    pretrain.add(model_source_schema("a model to go on training instead of one from scratch (its architecture and "
                                     "weights; model.* unset but max_seq_len, rope_theta, rope_scaling)",
                                     /*required=*/false));
    t.push_back({"pretrain",
                 "train a model from scratch, or go on training one (checkpoint.path), on a token stream (Megatron "
                 ".bin/.idx, MDS, nanoGPT's and llm.c's token files, or mock data)",
                 pretrain, run_pretrain, [](const Config& c) { return summarize_training(c); }, pretrain_shape});
    t.push_back({"full_finetune", "fine-tune every weight of a model on an instruct or chat dataset",
                 finetune_schema(FinetuneKind::full), run_finetune, summarize_finetune, finetune_shape});
    t.push_back({"lora_finetune", "fine-tune LoRA (or DoRA) adapters on a frozen model (instruct or chat dataset)",
                 finetune_schema(FinetuneKind::lora), run_finetune, summarize_finetune, finetune_shape});
    t.push_back({"lora_dpo", "align LoRA (or DoRA) adapters to chosen and rejected answers (DPO, IPO, RSO, SimPO)",
                 finetune_schema(FinetuneKind::lora_dpo), run_finetune, summarize_finetune, finetune_shape});
    t.push_back({"full_dpo", "align every weight of a model to chosen and rejected answers (DPO, IPO, RSO, SimPO)",
                 finetune_schema(FinetuneKind::full_dpo), run_finetune, summarize_finetune, finetune_shape});
    t.push_back({"generate", "complete prompts with a model (KV cache, temperature, top-k, top-p, chat templates)",
                 generate_schema(), run_generate, check_generate_config});
    t.push_back({"eval", "loss and perplexity on a dataset; lm-evaluation-harness tasks (multiple choice, LAMBADA, GSM8K)",
                 eval_schema(), run_eval, check_eval_config});
    return t;
  }();
  return table;
}

const Recipe& find_recipe(const std::string& name) {
  std::vector<std::string> names;
  for (const Recipe& r : recipes()) {
    if (r.name == name) return r;
    names.push_back(r.name);
  }
  // torchtune's lora_finetune_single_device, full_finetune_distributed, ...: one recipe here for any world size.
  for (const std::string& recipe : names) {
    if (name.starts_with(recipe + "_")) {
      fail("unknown recipe '{}': torchtune's single-device and distributed recipes are one here, '{}', which runs "
           "on one device, or on several processes under hone launch (hone launch --nproc-per-node N -- hone run {} "
           "...); recipes: {}",
           name, recipe, recipe, fmt::join(names, ", "));
    }
  }
  const std::string suggestion = closest_match(name, names);
  fail("unknown recipe '{}'{}; recipes: {}", name,
       suggestion.empty() ? std::string() : fmt::format(" (did you mean '{}'?)", suggestion), fmt::join(names, ", "));
}

}  // namespace hone
