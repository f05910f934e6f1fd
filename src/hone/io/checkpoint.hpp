#pragma once
// Training checkpoints and model folders (docs/architecture.md, "Checkpoints").
// A run directory holds step_NNNNNNN/ folders, each with model.safetensors (for
// a LoRA run: adapter.safetensors, the adapters only),
// model.json (the ModelConfig), optimizer.safetensors, trainer_state.json and,
// written last, manifest.json with every file's size and XXH3-64 checksum. A
// folder is written under a temporary name, fsynced and renamed; the file
// `latest` (the folder's name) is then replaced atomically. A process killed at
// any moment leaves the previous checkpoint intact and loadable.
//
// A model folder (what `hone convert --to hone` writes) is the same without the
// training state: model.safetensors, model.json, the tokenizer files and the
// manifest. Fine-tuning and inference start from either kind; resuming a
// training run needs a training checkpoint.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hone/config/config.hpp"
#include "hone/io/atomic_file.hpp"
#include "hone/io/safetensors.hpp"
#include "hone/io/weights.hpp"
#include "hone/model/transformer.hpp"
#include "hone/optim/adamw.hpp"

namespace hone {

// The model a fine-tuning run started from, as its checkpoints record it: the
// folder checkpoint.path named when the run began (a run directory's latest step
// folder then, as given: relative paths stay relative), and for a hone folder its
// weights file's XXH3-64 checksum from the manifest, which tells that model from
// a later step of the same run and finds it again where the files moved. A LoRA
// run's adapters only mean something on it, and DPO's reference is it.
struct BaseModelRecord {
  std::string folder;
  std::optional<std::string> weights_xxh3;  // none for other formats (Hugging Face, Meta, llm.c)
  // The folder from the working directory the record was made in (a relative
  // folder is found from another one by it); carried as it was, never recomputed.
  std::string absolute_folder;
};
// The record of the model `checkpoint_path` names now.
BaseModelRecord base_model_record(const std::string& checkpoint_path);
// Whether two records name the same model: by checksum where both have one, else by path.
bool same_base_model(const BaseModelRecord& a, const BaseModelRecord& b);
// "runs/pretrain/step_0000300 (weights xxh3 0123456789abcdef)"
std::string describe(const BaseModelRecord& base);

// Everything besides weights and optimizer moments that resuming needs.
struct TrainerState {
  int64_t step = 0;          // optimizer steps taken
  int64_t tokens_seen = 0;   // tokens of the samples trained on, padding left out
  int64_t samples_seen = 0;  // sequences trained on
  int64_t nonfinite_steps = 0;
  double train_seconds = 0;          // time in training steps, over the run and the runs it resumes
  std::optional<double> next_lr;     // the learning rate the next step takes by the run's schedule (older checkpoints: none)
  // The CPU threads a CPU run's steps ran on (a GPU run's and older checkpoints: none).
  std::optional<int64_t> cpu_threads;
  Json data_state = Json::object();  // the data loader's position
  Json config = Json::object();      // the resolved run config
  std::optional<BaseModelRecord> base_model;  // a fine-tuning run's; none for pretraining and older checkpoints
};

// Writes step_<step>/ under run_dir and points `latest` at it; then removes the
// oldest checkpoints beyond keep_last_n (0 keeps all). `companion_files`
// (tokenizer files, by companion_file_names()) are copied in, so that inference
// and exports find them with the weights. Returns the folder path.
std::string save_checkpoint(const std::string& run_dir, const Transformer& model, const AdamW& optimizer,
                            const TrainerState& state, int64_t keep_last_n,
                            const std::vector<std::string>& companion_files = {});

// The same save by several data-parallel ranks, whose optimizers may each own a
// ZeRO shard (run_dir on a file system they share). With a barrier between steps:
//   rank 0:     TemporaryCheckpointFolder dir(run_dir, step) a fresh temporary folder
//   every rank: write_optimizer_state(dir, ...)             its shard (unsharded: rank 0 alone);
//                                                           returns the file's name, size and checksum
//   rank 0:     CheckpointWeights(dir, model)               the weights, a parameter at a time
//                                                           (the ranks gather each in turn)
//   rank 0:     finish_checkpoint(run_dir, dir, ...)        state, and the manifest listing every
//                                                           file written; rename, latest
std::string checkpoint_temp_folder(const std::string& run_dir, int64_t step);
// The temporary folder a checkpoint is written in, made fresh (whatever a killed
// save left there is removed) and removed again when this goes out of scope: a
// save that fails (a full disk, a tokenizer file gone) leaves nothing behind,
// and after finish_checkpoint has renamed it there is nothing to remove.
class TemporaryCheckpointFolder {
 public:
  TemporaryCheckpointFolder(const std::string& run_dir, int64_t step);
  ~TemporaryCheckpointFolder();
  TemporaryCheckpointFolder(const TemporaryCheckpointFolder&) = delete;
  TemporaryCheckpointFolder& operator=(const TemporaryCheckpointFolder&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};
std::string optimizer_shard_file(int rank, int world);
std::optional<std::pair<std::string, WrittenFile>> write_optimizer_state(const std::string& dir,
                                                                         const Transformer& model,
                                                                         const AdamW& optimizer, int rank, int world);
// A checkpoint's weights file: the trained parameters (all of them, or a LoRA
// run's adapters), whole, in their master dtype, written one at a time in
// order(), so that a sharded model is never whole at once.
class CheckpointWeights {
 public:
  CheckpointWeights(const std::string& dir, const Transformer& model);
  // The order write() takes them in: unit by unit (Transformer's units), as declared within one.
  static std::vector<const Parameter*> order(const Transformer& model);
  // This file's parameters, order(model).
  const std::vector<const Parameter*>& parameters() const { return order_; }
  // The next parameter's whole value (whole_shape, master dtype; any device).
  void write(const Parameter& p, const Tensor& whole);
  // The file's name in the folder, its size and checksum.
  std::pair<std::string, WrittenFile> commit();

 private:
  std::string file_;
  std::vector<const Parameter*> order_;
  size_t next_ = 0;
  SafetensorsWriter writer_;
};

// `files`: what the ranks wrote into dir (the weights, every optimizer shard).
std::string finish_checkpoint(const std::string& run_dir, const std::string& dir, const Transformer& model,
                              int64_t optimizer_steps, const TrainerState& state, int64_t keep_last_n,
                              const std::map<std::string, WrittenFile>& files,
                              const std::vector<std::string>& companion_files = {});

// The checkpoint folder `resume` refers to: "latest" (the folder `latest` in
// run_dir names, or without it, or where that folder is gone, the last complete
// step folder; nullopt when the run has none yet), a checkpoint folder (a path, or a step folder's name in
// run_dir) or a run directory (its latest).
std::optional<std::string> find_checkpoint(const std::string& run_dir, const std::string& resume);
// The step folder's name in run_dir's `latest` file; nullopt where it has none.
std::optional<std::string> name_in_latest(const std::string& run_dir);
// A run directory means its latest checkpoint; any other path is itself.
std::string model_folder_of(const std::string& path);

// Verifies the manifest (sizes and checksums) and loads weights (for a LoRA
// model: its adapters; the base comes from where the run loaded it), the moments
// of the optimizer's shard (from any world size's shards: resharding) and state. Any missing, truncated or corrupt file is an error naming it, and so is
// a model folder, which has no training state to resume.
TrainerState load_checkpoint(const std::string& folder, Transformer& model, AdamW& optimizer);
// The config a checkpoint's run was trained with (its trainer_state.json's), read
// without its weights: a resume checks its settings before loading them.
Json checkpoint_config(const std::string& folder);

// A LoRA run's adapters only mean something on the base model they were trained
// on: one of another shape than `base` is an error naming both.
void check_adapters_base(const std::string& folder, const ModelConfig& base);
// Loads the adapters of a LoRA run's checkpoint folder into a model built with
// the same LoRA settings (for inference or further training).
void load_adapters(const std::string& folder, Transformer& model);

// The base model a fine-tuning run's checkpoint folder records (nullopt: a
// pretraining run's, or a checkpoint from before hone recorded it).
std::optional<BaseModelRecord> checkpoint_base_model(const std::string& folder);

// Whether a checkpoint folder holds a LoRA run's adapters rather than weights.
bool is_lora_checkpoint(const std::string& folder);
// What a lora_finetune checkpoint's run says of its adapters (trainer_state.json's
// config): their settings, the base model they were trained on (the folder its
// checkpoint.path named then, as recorded; older runs: checkpoint.path as given,
// and checkpoint.format), and its tokenizer.path when it set one.
struct TrainedLora {
  LoraConfig lora;
  std::string base, base_format;
  std::optional<BaseModelRecord> base_model;  // none in runs from before hone recorded it
  std::optional<std::string> tokenizer;
};
TrainedLora read_trained_lora(const std::string& folder);

// Verifies a checkpoint folder's manifest; throws hone::Error naming the first bad file.
void verify_checkpoint(const std::string& folder);

std::string checkpoint_folder_name(int64_t step);

// Writes a model folder with the weights of `source` stored in `dtype` (default:
// as the source stores them) and its companion files (tokenizer). The folder
// must not exist (or be empty).
void save_model(const WeightSource& source, const std::string& folder, std::optional<DType> dtype = std::nullopt);

// The ModelConfig of a model or checkpoint folder (its model.json).
ModelConfig read_model_config(const std::string& folder);

// A model or checkpoint folder as a weight source, its manifest verified first.
// Weights stored in bf16 or f16 are converted on reading.
std::unique_ptr<WeightSource> open_model_folder(const std::string& folder);

// The adapter file of a LoRA run's checkpoint folder.
std::string adapter_file(const std::string& folder);

// What a checkpoint's run trained, read a parameter at a time (so exports of a
// run whose weights are never whole on one rank need not gather them): the
// checkpoint's weights, or for a LoRA run `base` (the model it started from)
// with the checkpoint's adapters merged in, W += alpha/rank · B·A. `base` must
// outlive the source.
std::unique_ptr<WeightSource> open_trained_model(const std::string& folder, const WeightSource& base,
                                                 const std::optional<LoraConfig>& lora);
// A LoRA adapter's A or B by its hone name ("layers.3.lora.q_proj.a"), as f32.
using AdapterReader = std::function<Tensor(const std::string& name)>;
// A LoRA checkpoint's adapters (its manifest verified first).
AdapterReader checkpoint_adapters(const std::string& folder);
// Loads every adapter of `model` (built with LoRA) from `adapters`.
void load_adapters(const AdapterReader& adapters, Transformer& model);
// `base` with adapters of `lora` (from `folder`) merged into the weights they
// adapt, read a weight at a time; `what` names them in the description ("the
// PEFT adapters of DIR"); `notes` join the base's.
std::unique_ptr<WeightSource> merge_adapters(std::unique_ptr<WeightSource> base, const LoraConfig& lora,
                                             AdapterReader adapters, const std::string& folder, std::string what,
                                             std::vector<std::string> notes = {});

// Loads the weights of a model or checkpoint folder into `model` (for
// fine-tuning and inference; no optimizer state is needed or read).
void load_model_weights(const std::string& folder, Transformer& model);

}  // namespace hone
