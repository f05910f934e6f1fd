#pragma once
// The training loop every training recipe shares (pretrain, full_finetune,
// lora_finetune): micro-batches and gradient accumulation, LR schedule, clipping,
// logging and metrics, validation, checkpoints and exact resume, non-finite
// steps, and a graceful stop on SIGINT/SIGTERM. Recipes build the model and the
// data and hand them over.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hone/config/config.hpp"
#include "hone/data/batch.hpp"
#include "hone/io/checkpoint.hpp"
#include "hone/model/transformer.hpp"
#include "hone/train/metrics.hpp"
#include "hone/train/objective.hpp"
#include "hone/train/training_world.hpp"

namespace hone {

struct TrainingJob {
  TrainingWorld* world = nullptr;  // the ranks; the model lives on world->device()
  Transformer* model = nullptr;    // built with world->model_placement()
  // What a step minimises; null: the language model's loss.
  Objective* objective = nullptr;
  // This rank's slices of the data (batch_size samples per micro-batch, each of
  // the objective's rows_per_sample sequences).
  data::BatchSource* train = nullptr;
  data::BatchSource* validation = nullptr;  // null: nothing held out
  int64_t seq_len = 0;
  std::string data_description;
  std::vector<std::string> summary;  // printed when the run starts
  // Tokenizer files every checkpoint carries (generate and exports find them there).
  std::vector<std::string> companion_files;
  // The chat format a fine-tune trains, as a Jinja template (data::chat_template):
  // written to output_dir/chat_template.jinja, which checkpoints carry in place
  // of the tokenizer's own, and so do exports.
  std::optional<std::string> chat_template;
  // The model the run started from, which its checkpoints record (a LoRA
  // merge, and a fine-tuning resume, find it again by it); none for
  // pretraining from scratch.
  std::optional<BaseModelRecord> base_model;
  // Runs on rank 0 after the final checkpoint of a run that was not interrupted
  // (exports). `checkpoint` names that checkpoint when the exports are to read
  // the trained weights from it (they are not whole on rank 0: ZeRO-3 shards,
  // tensor-parallel parts); nullopt when job.model holds them. `companion_files`:
  // the files the run's checkpoints carry.
  std::function<void(RunConsole&, const std::optional<std::string>& checkpoint,
                     const std::vector<std::string>& companion_files)>
      on_finish;
};

// Why the run may not write to output_dir, if it may not: a run without
// `resume` into a folder that holds checkpoints would interleave two runs'
// checkpoints and metrics. Recipes call check_output_dir (which throws it, or
// resume_conflict's) before they load anything; `hone validate` prints it as a note.
std::optional<std::string> output_dir_conflict(const Config& config);
// Why `resume` would be refused, if it would: a checkpoint it names that is not
// there, or one trained with settings a resumed run keeps (the model, seed,
// data, tokenizer) that the config changes. `hone validate` prints it as a note.
std::optional<std::string> resume_conflict(const Config& config);
// A training run's length (exactly one of max_steps, epochs and max_tokens) and
// its optimizer settings, else an error naming the config: hone validate
// checks them as hone run does.
void check_training_settings(const Config& config);
void check_output_dir(const Config& config);

// Trains job.model as the resolved config says (batch_size,
// gradient_accumulation_steps, max_steps | epochs | max_tokens, optimizer.*,
// lr_scheduler.*, checkpoint.*, resume, eval.*, ...). Returns the exit status.
int run_training(const Config& config, TrainingJob job);

// The validations and saves a run still makes after `step` of `total_steps`
// (for its ETA): one every eval_every / checkpoint_every steps (0: none), the
// final validation, and the final save where save_final asks for one that is
// not a regular one.
struct PausesLeft {
  int64_t evaluations = 0, saves = 0;
};
PausesLeft pauses_left(int64_t step, int64_t total_steps, int64_t eval_every, int64_t checkpoint_every,
                       bool save_final);

}  // namespace hone
