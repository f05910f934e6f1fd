#include "hone/train/dpo.hpp"

#include <array>
#include <cmath>

namespace hone {

namespace {

// log σ(x), without overflow for large |x|.
double log_sigmoid(double x) { return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x)); }
double sigmoid(double x) { return std::exp(log_sigmoid(x)); }

// Each row's π: the sum of its target tokens' log-probabilities, −Σ losses of
// the last forward pass (masked targets have loss 0).
std::vector<double> row_log_probs(const Transformer& model, int64_t rows) {
  const std::vector<double> losses = model.token_losses().to_vector<double>();
  const size_t per_row = losses.size() / size_t(rows);
  std::vector<double> log_probs(size_t(rows), 0.0);
  for (size_t i = 0; i < losses.size(); ++i) log_probs[i / per_row] -= losses[i];
  return log_probs;
}

// Each row's count of answer tokens (targets that are not ignored): SimPO's
// per-token means.
std::vector<double> row_answer_tokens(const Tensor& targets) {
  const int64_t rows = targets.size(0);
  const std::vector<int32_t> ids = targets.to_vector<int32_t>();
  const size_t per_row = ids.size() / size_t(rows);
  std::vector<double> counts(size_t(rows), 0.0);
  for (size_t i = 0; i < ids.size(); ++i) counts[i / per_row] += ids[i] != ops::kIgnoreIndex ? 1.0 : 0.0;
  return counts;
}

// A pair's loss as a function of x, the chosen answer's lead (see dpo.hpp),
// and its derivative by x.
struct PairLoss {
  double loss, d_x;
};
PairLoss pair_loss(const DpoConfig& c, double x) {
  switch (c.loss) {
    case PreferenceLoss::dpo:
    case PreferenceLoss::simpo: {
      const double h = c.beta * x - (c.loss == PreferenceLoss::simpo ? c.gamma : 0.0), eps = c.label_smoothing;
      return {-(1 - eps) * log_sigmoid(h) - eps * log_sigmoid(-h),
              c.beta * (-(1 - eps) * sigmoid(-h) + eps * sigmoid(h))};
    }
    case PreferenceLoss::ipo: {
      const double gap = x - 1 / (2 * c.beta);
      return {gap * gap, 2 * gap};
    }
    case PreferenceLoss::rso: {
      const double hinge = 1 - c.beta * x;
      return hinge > 0 ? PairLoss{hinge, -c.beta} : PairLoss{0.0, 0.0};
    }
  }
  fail("unknown preference loss {}", int(c.loss));
}

struct LossName {
  PreferenceLoss loss;
  const char* key;    // loss.type's value
  const char* title;  // in sentences
};
constexpr std::array<LossName, 4> kLossNames = {{{PreferenceLoss::dpo, "dpo", "DPO"},
                                                 {PreferenceLoss::ipo, "ipo", "IPO"},
                                                 {PreferenceLoss::rso, "rso", "RSO"},
                                                 {PreferenceLoss::simpo, "simpo", "SimPO"}}};

}  // namespace

PreferenceLoss parse_preference_loss(const std::string& name) {
  for (const LossName& known : kLossNames) {
    if (name == known.key) return known.loss;
  }
  fail("unknown preference loss '{}' (dpo, ipo, rso or simpo)", name);
}

const char* preference_loss_name(PreferenceLoss loss, bool title) {
  for (const LossName& known : kLossNames) {
    if (loss == known.loss) return title ? known.title : known.key;
  }
  fail("unknown preference loss {}", int(loss));
}

std::string describe(const DpoConfig& c, const std::string& reference_model) {
  const std::string reference = "; the reference model is " + reference_model;
  switch (c.loss) {
    case PreferenceLoss::dpo:
      return fmt::format("DPO: beta {}, label smoothing {}{}", c.beta, c.label_smoothing, reference);
    case PreferenceLoss::ipo: return fmt::format("IPO: tau (beta) {}{}", c.beta, reference);
    case PreferenceLoss::rso: return fmt::format("RSO (hinge loss): gamma (beta) {}{}", c.beta, reference);
    case PreferenceLoss::simpo:
      return fmt::format("SimPO: beta {}, gamma {}, label smoothing {}; no reference model (each answer's mean token "
                         "log-probability)",
                         c.beta, c.gamma, c.label_smoothing);
  }
  fail("unknown preference loss {}", int(c.loss));
}

void DpoSums::add(const DpoSums& o) {
  loss += o.loss;
  chosen_rewards += o.chosen_rewards;
  rejected_rewards += o.rejected_rewards;
  wins += o.wins;
  chosen_log_probs += o.chosen_log_probs;
  rejected_log_probs += o.rejected_log_probs;
  pairs += o.pairs;
}

Metrics DpoSums::means(const std::string& prefix) const {
  const double n = double(std::max<int64_t>(pairs, 1));
  return {{prefix + "rewards/chosen", chosen_rewards / n},
          {prefix + "rewards/rejected", rejected_rewards / n},
          {prefix + "rewards/accuracies", wins / n},
          {prefix + "rewards/margins", (chosen_rewards - rejected_rewards) / n},
          {prefix + "log_probs/chosen", chosen_log_probs / n},
          {prefix + "log_probs/rejected", rejected_log_probs / n}};
}

DpoForward dpo_forward(Transformer& model, const Batch& batch, const DpoConfig& config, Transformer* reference_model,
                       int64_t pairs) {
  const int64_t rows = batch.tokens.size(0);
  HONE_CHECK(rows % 2 == 0, "a DPO batch holds pairs of rows, got {} rows", rows);
  const size_t counted_rows = pairs < 0 ? size_t(rows) : size_t(std::min(2 * pairs, rows));
  // Without a reference (SimPO) π is a per-token mean and r is 0.
  std::vector<double> reference(size_t(rows), 0.0), per_row(size_t(rows), 1.0);
  if (config.uses_reference() && reference_model) {
    reference_model->forward(batch.tokens, batch.targets, batch.positions);
    reference = row_log_probs(*reference_model, rows);
  } else if (config.uses_reference()) {
    HONE_CHECK(model.lora().has_value(),
               "DPO on the whole model needs a reference model: a frozen copy of it (the base without adapters is "
               "LoRA's)");
    model.set_adapters_enabled(false);
    model.forward(batch.tokens, batch.targets, batch.positions);
    model.set_adapters_enabled(true);
    reference = row_log_probs(model, rows);
  } else {
    per_row = row_answer_tokens(batch.targets);
    for (double& n : per_row) n = std::max(n, 1.0);
  }
  model.forward(batch.tokens, batch.targets, batch.positions);
  std::vector<double> policy = row_log_probs(model, rows);
  for (size_t row = 0; row < size_t(rows); ++row) policy[row] /= per_row[row];

  const double beta = config.beta;
  DpoForward out;
  out.d_log_probs.assign(size_t(rows), 0.0);
  for (size_t c = 0; c < counted_rows; c += 2) {
    const size_t r = c + 1;
    const double chosen_reward = beta * (policy[c] - reference[c]);
    const double rejected_reward = beta * (policy[r] - reference[r]);
    const PairLoss pair = pair_loss(config, (policy[c] - reference[c]) - (policy[r] - reference[r]));
    out.sums.loss += pair.loss;
    out.sums.chosen_rewards += chosen_reward;
    out.sums.rejected_rewards += rejected_reward;
    out.sums.wins += chosen_reward > rejected_reward ? 1.0 : 0.0;
    out.sums.chosen_log_probs += policy[c];
    out.sums.rejected_log_probs += policy[r];
    ++out.sums.pairs;
    // d(loss)/d(row's sum of log-probabilities), through SimPO's mean.
    out.d_log_probs[c] = pair.d_x / per_row[c];
    out.d_log_probs[r] = -pair.d_x / per_row[r];
  }
  return out;
}

Tensor dpo_token_weights(const Transformer& model, const DpoForward& forward, const Batch& batch, double scale) {
  // A token's loss is −log p, so d(loss)/d(token loss) = −d(loss)/dπ of its row.
  const int64_t rows = batch.tokens.size(0), seq = batch.tokens.size(1);
  std::vector<double> weights(size_t(rows * seq));
  for (int64_t row = 0; row < rows; ++row) {
    std::fill_n(weights.begin() + row * seq, seq, -scale * forward.d_log_probs[size_t(row)]);
  }
  const DType dtype = model.token_losses().dtype();
  const Tensor host = dtype == DType::f64 ? Tensor::from(weights, {rows * seq})
                                          : Tensor::from(std::vector<float>(weights.begin(), weights.end()), {rows * seq});
  return host.to(model.device());
}

std::unique_ptr<Transformer> make_reference_model(const ModelConfig& config, DType dtype, Device device) {
  auto reference = std::make_unique<Transformer>(config, dtype, device, std::nullopt, ModelPlacement{},
                                                 BaseWeights::frozen);
  reference->set_training(false);
  reference->set_activation_checkpointing(true);
  return reference;
}

namespace {

class Dpo final : public Objective {
 public:
  Dpo(const DpoConfig& config, Transformer* reference) : config_(config), reference_(reference) {}

  int64_t rows_per_sample() const override { return 2; }
  const char* sample_name() const override { return "pair"; }

  StepStats step(Transformer& model, AdamW& optimizer, std::span<const Batch> micro_batches, double lr,
                 double max_grad_norm, dist::DataParallel* parallel) override {
    StepStats stats;
    stats.tokens = count_step_targets(micro_batches, parallel);
    // The loss is the mean over the global batch's pairs.
    double pairs = 0;
    for (const Batch& b : micro_batches) pairs += double(b.tokens.size(0) / 2);
    if (parallel) pairs = parallel->sum(pairs);
    model.trainable_params().zero_grad();
    DpoSums sums;
    for (size_t k = 0; k < micro_batches.size(); ++k) {
      set_dropout_round(model, optimizer, k, micro_batches.size(), parallel);
      const Batch& b = micro_batches[k];
      const DpoForward forward = dpo_forward(model, b, config_, reference_);
      sums.add(forward.sums);
      step_backward(model, k, micro_batches.size(), 1.0, parallel, dpo_token_weights(model, forward, b, 1.0 / pairs));
    }
    const Tensor reduced = reduced_gradients(model, parallel);
    if (parallel) sums = summed_over(sums, *parallel);
    stats.loss = sums.loss / double(sums.pairs);
    stats.metrics = sums.means();
    apply_step(stats, model, optimizer, reduced, lr, max_grad_norm, parallel);
    return stats;
  }

  Evaluation evaluate(Transformer& model, data::BatchSource& source, int64_t batches,
                      const TrainingWorld& world, const std::function<void(int64_t done)>& progress) override {
    source.rewind();
    DpoSums sums;
    const EvaluationMode evaluating(model);
    for (int64_t i = 0; i < batches && !source.pass_done(); ++i) {
      if (progress) progress(i);
      // The pass's padding pairs, which have no answer (training drops such
      // pairs when it reads them), trail the batch: counted on the host.
      const Batch batch = source.next();
      const std::vector<double> answers = row_answer_tokens(batch.targets);
      int64_t pairs = 0;
      while (size_t(2 * pairs) < answers.size() && answers[size_t(2 * pairs)] + answers[size_t(2 * pairs + 1)] > 0) {
        ++pairs;
      }
      sums.add(dpo_forward(model, batch.to(model.device()), config_, reference_, pairs).sums);
    }
    if (dist::DataParallel* parallel = world.data_parallel()) sums = summed_over(sums, *parallel);
    const double loss = sums.loss / double(std::max<int64_t>(sums.pairs, 1));
    Metrics metrics = {{"loss/eval/total", loss}};
    const Metrics means = sums.means("eval/");
    metrics.insert(metrics.end(), means.begin(), means.end());
    return {.metrics = metrics,
            .summary = fmt::format("validation {} loss {:.4f}, chosen preferred in {:.1f}% of {} pairs (reward margin "
                                   "{:.4f})",
                                   preference_loss_name(config_.loss, true), loss, 100.0 * sums.wins / double(std::max<int64_t>(sums.pairs, 1)), sums.pairs,
                                   (sums.chosen_rewards - sums.rejected_rewards) / double(std::max<int64_t>(sums.pairs, 1)))};
  }

  // The reference's forward pass adds a third of a whole model's training FLOPs.
  double flops_per_token(const ModelConfig& config, const std::optional<LoraConfig>& lora,
                         int64_t length) const override {
    const double reference = config_.uses_reference() ? config.training_flops_per_token(length) / 3.0 : 0.0;
    return training_flops_per_token(config, lora, length) + reference;
  }

 private:
  static DpoSums summed_over(const DpoSums& local, dist::DataParallel& parallel) {
    DpoSums s;
    s.loss = parallel.sum(local.loss);
    s.chosen_rewards = parallel.sum(local.chosen_rewards);
    s.rejected_rewards = parallel.sum(local.rejected_rewards);
    s.wins = parallel.sum(local.wins);
    s.chosen_log_probs = parallel.sum(local.chosen_log_probs);
    s.rejected_log_probs = parallel.sum(local.rejected_log_probs);
    s.pairs = int64_t(parallel.sum(double(local.pairs)));
    return s;
  }

  DpoConfig config_;
  Transformer* reference_;
};

}  // namespace

std::unique_ptr<Objective> dpo_objective(const DpoConfig& config, Transformer* reference) {
  return std::make_unique<Dpo>(config, reference);
}

}  // namespace hone
