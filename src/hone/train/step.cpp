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
                     double max_grad_norm) {
  HONE_CHECK(!micro_batches.empty(), "a training step needs at least one micro-batch");
  StepStats stats;
  for (const Batch& b : micro_batches) stats.tokens += count_targets(b.targets);
  HONE_CHECK(stats.tokens > 0, "every target of this step is masked: nothing to learn from");
  ParameterSet& trained = model.trainable_params();
  trained.zero_grad();
  double loss_sum = 0;
  for (size_t k = 0; k < micro_batches.size(); ++k) {
    // Dropout masks are a function of the micro-batch's global index.
    model.set_dropout_round(uint64_t(optimizer.steps_taken()) * micro_batches.size() + k);
    const Batch& b = micro_batches[k];
    loss_sum += model.forward(b.tokens, b.targets, b.positions).sum;
    model.backward(1.0 / double(stats.tokens));
  }
  stats.loss = loss_sum / double(stats.tokens);
  stats.grad_norm = grad_norm(trained);
  stats.lr = lr;
  stats.applied = std::isfinite(stats.loss) && std::isfinite(stats.grad_norm);
  if (stats.applied) optimizer.step(lr, clip_coefficient(stats.grad_norm, max_grad_norm));
  return stats;
}

}  // namespace hone
