#pragma once
// What the inference recipes (generate, eval) share: their config keys, and the
// model they load (any format hone reads, with the LoRA adapters of a
// lora_finetune run merged in when given) with its tokenizer.
#include <memory>
#include <utility>

#include "hone/config/config.hpp"
#include "hone/data/instruct.hpp"
#include "hone/data/tokenizers/tokenizer.hpp"
#include "hone/model/transformer.hpp"

namespace hone {

// seed, device, dtype, threads, checkpoint.path, lora.adapter, tokenizer.path.
Schema inference_schema();

struct InferenceModel {
  std::unique_ptr<Transformer> model;
  std::unique_ptr<Tokenizer> tokenizer;  // null when not asked for
  std::string description;  // for messages
  // What the user should know of the model as loaded (printed after "note: "):
  // its format's (a context length assumed) and the adapters' (another base).
  std::vector<std::string> notes;
  // The EOS ids the model's generation_config.json names (else its
  // config.json): where transformers' generate() stops (Llama 3 Instruct lists
  // <|end_of_text|>, <|eom_id|> and <|eot_id|>).
  std::vector<int32_t> eos_ids;
  Json generation_config;  // the model's generation_config.json, or null
};

// generate and eval run as one process: an error when a launcher (hone launch,
// torchrun, srun) started several, each of which would do the whole work and
// write the same files.
void check_one_process(const std::string& recipe);

// Loads checkpoint.path (and lora.adapter: a lora_finetune checkpoint folder or
// run directory, whose LoRA settings it reads) and, unless `with_tokenizer` is
// false (evaluation on token data needs none), the tokenizer (tokenizer.path,
// else the model's folder, else the adapter run's tokenizer.path).
InferenceModel load_inference_model(const Config& config, bool with_tokenizer = true);

// The dataset section of the hone fine-tuning run whose model this is (the
// adapters' run where adapter_path is a lora_finetune checkpoint or run
// directory, else model_path's), whose template and chat format its prompts are
// written in, with that run's checkpoint folder; null for any other model.
std::pair<Json, std::string> fine_tuning_dataset_of(const std::string& model_path, const std::string& adapter_path);
// That of the model the config loads (checkpoint.path, lora.adapter).
std::pair<Json, std::string> fine_tuning_dataset_of(const Config& config);
// The prompt format of dataset keys as a run's config holds them (template,
// chat_format, in_chat_format, system_prompt; absent: plain, llama3, false, none).
data::InstructOptions prompt_format_of(const Json& dataset);

}  // namespace hone
