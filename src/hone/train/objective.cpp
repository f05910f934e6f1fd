#include "hone/train/objective.hpp"

#include "hone/train/evaluation.hpp"

namespace hone {

namespace {

class LanguageModel final : public Objective {
 public:
  StepStats step(Transformer& model, AdamW& optimizer, std::span<const Batch> micro_batches, double lr,
                 double max_grad_norm, dist::DataParallel* parallel) override {
    return train_step(model, optimizer, micro_batches, lr, max_grad_norm, parallel);
  }

  Evaluation evaluate(Transformer& model, data::BatchSource& source, int64_t batches,
                      const TrainingWorld& world, const std::function<void(int64_t done)>& progress) override {
    // Each rank evaluates its slice of the batches; the mean is over all of them.
    const LossEvaluation local = evaluate_loss(model, source, batches, progress);
    LossEvaluation e;
    e.tokens = int64_t(world.sum(double(local.tokens)));
    e.loss = world.sum(local.loss * double(local.tokens)) / double(std::max<int64_t>(e.tokens, 1));
    return {.metrics = {{"metrics/eval/LanguageCrossEntropy", e.loss},
                        {"metrics/eval/LanguagePerplexity", e.perplexity()}},
            .summary = fmt::format("validation loss {:.4f} (perplexity {:.2f}) over {} tokens", e.loss,
                                   e.perplexity(), e.tokens)};
  }
};

}  // namespace

std::unique_ptr<Objective> language_model_objective() { return std::make_unique<LanguageModel>(); }

}  // namespace hone
