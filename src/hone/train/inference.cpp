#include "hone/train/inference.hpp"

#include <algorithm>
#include <filesystem>

#include "hone/core/parallel.hpp"
#include "hone/dist/environment.hpp"
#include "hone/io/checkpoint.hpp"
#include "hone/io/convert.hpp"
#include "hone/io/hf.hpp"
#include "hone/io/json_file.hpp"
#include "hone/io/peft.hpp"
#include "hone/ops/ops.hpp"
#include "hone/train/run_config.hpp"

namespace hone {

namespace fs = std::filesystem;

namespace {

// The model's generation_config.json (transformers'), or null where it has none.
Json generation_config_of(const WeightSource& weights) {
  const std::vector<std::string> companions = weights.companion_files();
  const auto generation = std::ranges::find_if(
      companions, [](const std::string& file) { return fs::path(file).filename() == "generation_config.json"; });
  return generation != companions.end() ? read_json_file(*generation) : Json();
}

// InferenceModel::eos_ids of the model at `path`.
std::vector<int32_t> eos_ids_of(const Json& generation_config, const std::string& path) {
  const SpecialTokenIds ids =
      generation_config.is_object() ? special_ids_in(generation_config) : hf_config_special_ids(path);
  std::vector<int32_t> eos = ids.more_eos;
  if (ids.eos) eos.insert(eos.begin(), *ids.eos);
  return eos;
}

}  // namespace

Schema inference_schema() {
  Schema s;
  s.add({"recipe", ValueType::string, nullptr, "the recipe this config is for"});
  s.add({"seed", ValueType::integer, 1234, "seed of sampling"});
  s.add({"device", ValueType::string, "cpu", "cpu, cuda or cuda:N"});
  s.add({"dtype", ValueType::string, "fp32", "compute precision", {"fp32", "bf16"}});
  s.add({"threads", ValueType::integer, 0, "CPU threads (0: all cores)"}, Range::not_negative());
  s.add(model_source_schema("the model"));
  s.add({"lora.adapter", ValueType::string, nullptr,
         "LoRA adapters: a lora_finetune checkpoint folder or run directory, or a PEFT folder (adapter_config.json)"});
  s.add({"tokenizer.path", ValueType::string, nullptr, "tokenizer file or folder (default: the model's folder)"});
  s.add_foreign("checkpointer", "torchtune's; hone's model is checkpoint.path (the folder: its files and architecture "
                                "are read from it)");
  s.add_foreign("quantizer", "torchtune's; hone computes with the model's weights in dtype (no quantization)");
  return s;
}

std::pair<Json, std::string> fine_tuning_dataset_of(const std::string& model_path, const std::string& adapter_path) {
  const bool adapters = !adapter_path.empty() && !is_peft_folder(adapter_path);
  const std::string& path = adapters ? adapter_path : model_path;
  if (!fs::is_directory(path)) return {};
  const std::string folder = model_folder_of(path);
  if (!fs::exists(fs::path(folder) / "trainer_state.json")) return {};
  const Json config = checkpoint_config(folder);
  const Json dataset = config.value("dataset", Json());
  if (!dataset.is_object() || !dataset.value("template", Json()).is_string()) return {};
  return {dataset, folder};
}

std::pair<Json, std::string> fine_tuning_dataset_of(const Config& c) {
  return fine_tuning_dataset_of(c.get<std::string>("checkpoint.path"),
                                c.has("lora.adapter") ? c.get<std::string>("lora.adapter") : "");
}

data::InstructOptions prompt_format_of(const Json& dataset) {
  const auto key = [&](const char* name) { return dataset.is_object() ? dataset.value(name, Json()) : Json(); };
  const Json template_name = key("template"), chat_format = key("chat_format"), in_chat_format = key("in_chat_format"),
             system_prompt = key("system_prompt");
  data::InstructOptions format;
  format.format = data::parse_instruct_template(template_name.is_string() ? template_name.get<std::string>() : "plain");
  if (chat_format.is_string()) format.chat_format = data::parse_chat_format(chat_format.get<std::string>());
  format.in_chat_format = in_chat_format.is_boolean() && in_chat_format.get<bool>();
  if (system_prompt.is_string()) format.system_prompt = system_prompt.get<std::string>();
  return format;
}

void check_one_process(const std::string& recipe) {
  const dist::ProcessInfo process = dist::discover_process();
  const std::string launcher = process.launcher == "torchrun" ? "hone launch (or torchrun)"
                               : process.launcher == "slurm"  ? "srun"
                                                              : "mpirun";
  HONE_CHECK(process.world_size == 1, "hone run {} runs as one process, and {} started {} (this is rank {}): each "
             "would do the whole work and write the same files; run it without a launcher",
             recipe, launcher, process.world_size, process.rank);
}

InferenceModel load_inference_model(const Config& c, bool with_tokenizer) {
  const RunSettings run{.output_dir = "",
                        .seed = uint64_t(c.get<int64_t>("seed")),
                        .device = parse_device(c.get<std::string>("device")),
                        .dtype = parse_dtype(c.get<std::string>("dtype")),
                        .threads = int(c.get<int64_t>("threads"))};
  if (run.threads > 0) set_num_threads(run.threads);
  ops::use_device(run.device);
  const std::string model_path = c.get<std::string>("checkpoint.path");
  const std::unique_ptr<WeightSource> weights = open_weights(model_path, c.get<std::string>("checkpoint.format"));
  InferenceModel out;
  out.description = weights->description();
  out.notes = weights->notes();
  out.generation_config = generation_config_of(*weights);
  out.eos_ids = eos_ids_of(out.generation_config, model_path);

  std::string tokenizer = c.has("tokenizer.path") ? c.get<std::string>("tokenizer.path") : "";
  std::optional<LoraAdapters> adapters;
  if (c.has("lora.adapter")) {
    adapters = open_lora_adapters(c.get<std::string>("lora.adapter"), model_path, weights->config(), *weights);
    if (tokenizer.empty() && adapters->tokenizer) tokenizer = *adapters->tokenizer;
    out.description += ", " + adapters->description;
    out.notes.insert(out.notes.end(), adapters->notes.begin(), adapters->notes.end());
  }
  // Frozen: the weights in the compute dtype alone, no fp32 master or gradients.
  out.model = std::make_unique<Transformer>(weights->config(), run.dtype, run.device,
                                            adapters ? std::optional(adapters->lora) : std::nullopt,
                                            ModelPlacement{}, BaseWeights::frozen);
  load_weights(*weights, *out.model, LoadProgress::shown);
  if (adapters) {
    load_adapters(adapters->read, *out.model);
    out.model->merge_lora();  // inference runs the merged weights: no adapter cost per token
  }
  out.model->set_training(false);
  if (!with_tokenizer) return out;
  if (tokenizer.empty()) tokenizer = tokenizer_path_for_model(c);
  out.tokenizer = load_tokenizer(tokenizer);
  check_fits_vocabulary(*out.tokenizer, weights->config().vocab_size, tokenizer);
  return out;
}

}  // namespace hone
