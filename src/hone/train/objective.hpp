#pragma once
// What a training run minimises: the language model's loss (pretraining and
// supervised fine-tuning) or DPO's preference loss (dpo.hpp). The shared loop
// (trainer.hpp) asks its objective for every step and every validation.
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "hone/data/batch.hpp"
#include "hone/model/lora.hpp"
#include "hone/train/step.hpp"
#include "hone/train/training_world.hpp"

namespace hone {

class Objective {
 public:
  virtual ~Objective() = default;
  // Rows of a batch per sample: the batch source's batches hold batch_size
  // samples of this many rows (DPO: a chosen and a rejected sequence).
  virtual int64_t rows_per_sample() const { return 1; }
  virtual const char* sample_name() const { return "sample"; }
  // One optimizer step over this rank's micro-batches (train_step's contract).
  virtual StepStats step(Transformer& model, AdamW& optimizer, std::span<const Batch> micro_batches, double lr,
                         double max_grad_norm, dist::DataParallel* parallel) = 0;
  // Validation over one pass of `source` (each sample once; at most `batches`
  // batches) on each rank, merged over the world: metrics for metrics.jsonl,
  // and what the console says ("validation loss ..."). `progress` (may be
  // empty) is told the batches done before each batch, on every rank alike; it
  // may throw to cut the pass short.
  struct Evaluation {
    Metrics metrics;
    std::string summary;
  };
  virtual Evaluation evaluate(Transformer& model, data::BatchSource& source, int64_t batches,
                              const TrainingWorld& world, const std::function<void(int64_t done)>& progress) = 0;
  // FLOPs a step spends per token of its batches (PaLM's count), for MFU.
  virtual double flops_per_token(const ModelConfig& config, const std::optional<LoraConfig>& lora,
                                 int64_t length) const {
    return training_flops_per_token(config, lora, length);
  }
};

// The mean cross-entropy of the unmasked targets (train_step, evaluate_loss).
std::unique_ptr<Objective> language_model_objective();

}  // namespace hone
