#pragma once
// One training step: forward and backward over each micro-batch (gradient
// accumulation), global-norm clipping, AdamW, over the model's trainable
// parameters (the LoRA adapters when it has them).
#include <span>

#include "hone/data/batch.hpp"
#include "hone/dist/data_parallel.hpp"
#include "hone/model/transformer.hpp"
#include "hone/optim/adamw.hpp"
#include "hone/train/metrics.hpp"

namespace hone {

struct StepStats {
  double loss = 0;       // the objective's; the language model's: mean over the unmasked target tokens
  int64_t tokens = 0;    // unmasked target tokens
  double grad_norm = 0;  // before clipping
  double lr = 0;
  bool applied = true;   // false: the loss or gradients were not finite, no update was made
  Metrics metrics;       // the objective's own, logged with the loss
};

// The loss is the mean over all unmasked tokens of the step, however they are
// split into micro-batches. max_grad_norm <= 0 disables clipping. A step whose
// loss or gradient norm is not finite changes no weight.
// With `parallel`, the micro-batches are this rank's part of the global batch and
// the step is taken over all ranks' data (losses and token counts are global).
StepStats train_step(Transformer& model, AdamW& optimizer, std::span<const Batch> micro_batches, double lr,
                     double max_grad_norm, dist::DataParallel* parallel = nullptr);

// The pieces of a step, for objectives of their own (DPO):
// Unmasked targets of the micro-batches, over all ranks.
int64_t count_step_targets(std::span<const Batch> micro_batches, dist::DataParallel* parallel);
// Each forward pass of a step names its dropout round: a function of the
// micro-batch's global index, so that each rank draws its own masks.
void set_dropout_round(Transformer& model, const AdamW& optimizer, size_t micro_batch, size_t micro_batches,
                       dist::DataParallel* parallel);
// Backward of micro-batch k (of `micro_batches`): the last one completes the
// gradients, whose reduction over the ranks starts a bucket at a time while it runs.
void step_backward(Transformer& model, size_t k, size_t micro_batches, double loss_scale,
                   dist::DataParallel* parallel, const Tensor& token_weights = {});
// After every backward: the gradients, reduced over the ranks with `parallel`.
Tensor reduced_gradients(Transformer& model, dist::DataParallel* parallel);
// Their norm, clipping and AdamW, unless stats.loss or the norm is not finite:
// fills stats.grad_norm, lr and applied.
void apply_step(StepStats& stats, Transformer& model, AdamW& optimizer, const Tensor& reduced, double lr,
                double max_grad_norm, dist::DataParallel* parallel);

// Unmasked targets in a host tensor.
int64_t count_targets(const Tensor& targets);

}  // namespace hone
