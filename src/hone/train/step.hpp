#pragma once
// One training step: forward and backward over each micro-batch (gradient
// accumulation), global-norm clipping, AdamW, over the model's trainable
// parameters (the LoRA adapters when it has them).
#include <span>

#include "hone/data/batch.hpp"
#include "hone/model/transformer.hpp"
#include "hone/optim/adamw.hpp"
#include "hone/dist/data_parallel.hpp"

namespace hone {

struct StepStats {
  double loss = 0;       // mean over the unmasked target tokens of all micro-batches
  int64_t tokens = 0;    // unmasked target tokens
  double grad_norm = 0;  // before clipping
  double lr = 0;
  bool applied = true;   // false: the loss or gradients were not finite, no update was made
};

// The loss is the mean over all unmasked tokens of the step, however they are
// split into micro-batches. max_grad_norm <= 0 disables clipping. A step whose
// loss or gradient norm is not finite changes no weight.
// With `parallel`, the micro-batches are this rank's part of the global batch and
// the step is taken over all ranks' data (losses and token counts are global).
StepStats train_step(Transformer& model, AdamW& optimizer, std::span<const Batch> micro_batches, double lr,
                     double max_grad_norm, dist::DataParallel* parallel = nullptr);

// Unmasked targets in a host tensor.
int64_t count_targets(const Tensor& targets);

}  // namespace hone
