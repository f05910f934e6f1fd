#include "hone/train/step.hpp"

#include <cmath>

namespace hone {

int64_t count_targets(const Tensor& targets) {
  const Tensor host = targets.device().is_cpu() ? targets : targets.to(Device::cpu());
  const int32_t* t = host.data<int32_t>();
  int64_t count = 0;
  for (int64_t i = 0; i < host.numel(); ++i) count += t[i] != ops::kIgnoreIndex;
  return count;
}

StepStats train_step(Transformer& model, AdamW& optimizer, std::span<const Batch> micro_batches, double lr,
                     double max_grad_norm, dist::DataParallel* parallel) {
  HONE_CHECK(!micro_batches.empty(), "a training step needs at least one micro-batch");
  StepStats stats;
  for (const Batch& b : micro_batches) stats.tokens += count_targets(b.targets);
  // The loss is the mean over the whole global batch: every rank scales by the
  // global token count, and summing the ranks' gradients makes that mean's gradient.
  if (parallel) stats.tokens = int64_t(parallel->sum(double(stats.tokens)));
  HONE_CHECK(stats.tokens > 0, "every target of this step is masked: nothing to learn from");
  ParameterSet& trained = model.trainable_params();
  trained.zero_grad();
  double loss_sum = 0;
  // Dropout masks are a function of the micro-batch's global index: each rank
  // draws its own (the same masks on every rank would correlate their samples).
  const uint64_t ranks = parallel ? uint64_t(parallel->size()) : 1, rank = parallel ? uint64_t(parallel->rank()) : 0;
  const uint64_t first_round = (uint64_t(optimizer.steps_taken()) * ranks + rank) * micro_batches.size();
  const double loss_scale = 1.0 / double(stats.tokens);
  for (size_t k = 0; k < micro_batches.size(); ++k) {
    model.set_dropout_round(first_round + k);
    const Batch& b = micro_batches[k];
    loss_sum += model.forward(b.tokens, b.targets, b.positions, loss_scale).sum;
    // The last backward pass completes the gradients: their reduction over the
    // ranks starts, a bucket at a time, while it runs.
    const bool reduce_now = parallel && k + 1 == micro_batches.size();
    if (reduce_now) parallel->begin_reduction(trained);
    model.backward(loss_scale, reduce_now ? [&](std::span<Parameter* const> final_params) {
      parallel->gradients_final(final_params);
    } : Transformer::GradientsFinal());
  }
  const Tensor reduced = parallel ? parallel->finish_reduction() : trained.grads();
  if (parallel) loss_sum = parallel->sum(loss_sum);
  stats.loss = loss_sum / double(stats.tokens);
  stats.grad_norm = parallel ? parallel->grad_norm(reduced) : grad_norm(trained);
  stats.lr = lr;
  stats.applied = std::isfinite(stats.loss) && std::isfinite(stats.grad_norm);
  if (stats.applied) {
    const bool sharded_grads = parallel && parallel->zero_stage() == 2;
    optimizer.step(lr, clip_coefficient(stats.grad_norm, max_grad_norm), sharded_grads ? reduced : Tensor());
    if (parallel) parallel->gather_parameters(trained);
  }
  return stats;
}

}  // namespace hone
