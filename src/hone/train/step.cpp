#include "hone/train/step.hpp"

#include <cmath>

namespace hone {

static_assert(data::kIgnoreTarget == ops::kIgnoreIndex, "the data's masked targets are the loss's ignored ones");

int64_t count_targets(const Tensor& targets) {
  const Tensor host = targets.device().is_cpu() ? targets : targets.to(Device::cpu());
  const int32_t* t = host.data<int32_t>();
  int64_t count = 0;
  for (int64_t i = 0; i < host.numel(); ++i) count += t[i] != ops::kIgnoreIndex;
  return count;
}

int64_t count_step_targets(std::span<const Batch> micro_batches, dist::DataParallel* parallel) {
  HONE_CHECK(!micro_batches.empty(), "a training step needs at least one micro-batch");
  int64_t tokens = 0;
  for (const Batch& b : micro_batches) tokens += count_targets(b.targets);
  if (parallel) tokens = int64_t(parallel->sum(double(tokens)));
  HONE_CHECK(tokens > 0, "every target of this step is masked: nothing to learn from");
  return tokens;
}

void set_dropout_round(Transformer& model, const AdamW& optimizer, size_t micro_batch, size_t micro_batches,
                       dist::DataParallel* parallel) {
  const uint64_t ranks = parallel ? uint64_t(parallel->size()) : 1, rank = parallel ? uint64_t(parallel->rank()) : 0;
  model.set_dropout_round((uint64_t(optimizer.steps_taken()) * ranks + rank) * micro_batches + micro_batch);
}

void step_backward(Transformer& model, size_t k, size_t micro_batches, double loss_scale,
                   dist::DataParallel* parallel, const Tensor& token_weights) {
  const bool reduce_now = parallel && k + 1 == micro_batches;
  if (reduce_now) parallel->begin_reduction(model.trainable_params());
  model.backward(loss_scale,
                 reduce_now ? [&](std::span<Parameter* const> final_params) { parallel->gradients_final(final_params); }
                            : Transformer::GradientsFinal(),
                 token_weights);
}

Tensor reduced_gradients(Transformer& model, dist::DataParallel* parallel) {
  return parallel ? parallel->finish_reduction() : model.trainable_params().grads();
}

void apply_step(StepStats& stats, Transformer& model, AdamW& optimizer, const Tensor& reduced, double lr,
                double max_grad_norm, dist::DataParallel* parallel) {
  stats.grad_norm = parallel ? parallel->grad_norm(reduced) : grad_norm(model.trainable_params());
  stats.lr = lr;
  stats.applied = std::isfinite(stats.loss) && std::isfinite(stats.grad_norm);
  if (stats.applied) {
    const bool sharded_grads = parallel && parallel->zero_stage() == 2;
    optimizer.step(lr, clip_coefficient(stats.grad_norm, max_grad_norm), sharded_grads ? reduced : Tensor());
    if (parallel) parallel->gather_parameters(model.trainable_params());
  }
}

StepStats train_step(Transformer& model, AdamW& optimizer, std::span<const Batch> micro_batches, double lr,
                     double max_grad_norm, dist::DataParallel* parallel) {
  StepStats stats;
  // The loss is the mean over the whole global batch: every rank scales by the
  // global token count, and summing the ranks' gradients makes that mean's gradient.
  stats.tokens = count_step_targets(micro_batches, parallel);
  model.trainable_params().zero_grad();
  double loss_sum = 0;
  const double loss_scale = 1.0 / double(stats.tokens);
  for (size_t k = 0; k < micro_batches.size(); ++k) {
    set_dropout_round(model, optimizer, k, micro_batches.size(), parallel);
    const Batch& b = micro_batches[k];
    loss_sum += model.forward(b.tokens, b.targets, b.positions, loss_scale).sum;
    step_backward(model, k, micro_batches.size(), loss_scale, parallel);
  }
  const Tensor reduced = reduced_gradients(model, parallel);
  if (parallel) loss_sum = parallel->sum(loss_sum);
  stats.loss = loss_sum / double(stats.tokens);
  stats.metrics = {{"metrics/train/LanguageCrossEntropy", stats.loss},
                   {"metrics/train/LanguagePerplexity", std::exp(stats.loss)}};
  apply_step(stats, model, optimizer, reduced, lr, max_grad_norm, parallel);
  return stats;
}

}  // namespace hone
