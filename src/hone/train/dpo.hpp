#pragma once
// DPO (Rafailov et al. 2023, direct preference optimisation), as torchtune's
// lora_dpo and full_dpo recipes train it: each sample is a pair of sequences,
// a chosen and a rejected answer to one prompt, and the reference model is the
// model training started from: for LoRA adapters the frozen base, computed
// with the adapters off; for the whole model a frozen copy of it. With π the sum of
// a sequence's answer-token log-probabilities under the trained model and r
// under the reference, x = (π_chosen − r_chosen) − (π_rejected − r_rejected)
// is how much more the model prefers the chosen answer than the reference
// does, and a pair's loss (torchtune's loss classes) is
//   dpo:   −(1 − ε)·log σ(β·x) − ε·log σ(−β·x)   (ε: label smoothing, cDPO)
//   ipo:   (x − 1/(2β))²                          (Azar et al. 2023)
//   rso:   max(0, 1 − β·x)                        (hinge; Liu et al. 2023)
//   simpo: dpo's with β·x − γ, where x = π̄_chosen − π̄_rejected, π̄ the mean
//          of the answer's token log-probabilities: no reference model
//          (Meng et al. 2024)
// averaged over the step's pairs. Its gradient reaches the model as a weight
// on each sequence's token losses (Transformer::backward's token weights).
#include <memory>
#include <string>
#include <vector>

#include "hone/train/objective.hpp"

namespace hone {

enum class PreferenceLoss { dpo, ipo, rso, simpo };
// "dpo", "ipo", "rso", "simpo" (loss.type).
PreferenceLoss parse_preference_loss(const std::string& name);
// loss.type's value, or with `title` the name in sentences ("SimPO").
const char* preference_loss_name(PreferenceLoss loss, bool title = false);

struct DpoConfig {
  PreferenceLoss loss = PreferenceLoss::dpo;
  double beta = 0.1;
  double label_smoothing = 0.0;  // dpo and simpo
  double gamma = 0.5;            // simpo's target reward margin
  // Whether the loss compares with a reference model (all but SimPO).
  bool uses_reference() const { return loss != PreferenceLoss::simpo; }
};
// One line for a run's banner: the loss, its settings and its reference
// (`reference`, e.g. "the base (adapters off)"; SimPO has none).
std::string describe(const DpoConfig& config, const std::string& reference);

// Sums over pairs of what a step reports: the loss, the rewards β·(π − r) of
// the chosen and the rejected sequences (SimPO: β·π̄), how many pairs the
// chosen one wins, and the log-probabilities π (SimPO: π̄) the loss used.
struct DpoSums {
  double loss = 0, chosen_rewards = 0, rejected_rewards = 0, wins = 0, chosen_log_probs = 0,
         rejected_log_probs = 0;
  int64_t pairs = 0;
  void add(const DpoSums& other);
  // torchtune's metric names (rewards/chosen, ...), each a mean over the pairs;
  // `prefix` goes before each ("eval/").
  Metrics means(const std::string& prefix = "") const;
};

// One batch of pairs (rows 2i and 2i + 1: pair i's chosen and rejected
// sequence): the reference's (unless SimPO) and the model's forward passes, the pairs' sums,
// and the derivative of Σ pair losses by each row's π. The reference is
// `reference` where given (a frozen model), else `model` with its adapters off.
struct DpoForward {
  DpoSums sums;
  std::vector<double> d_log_probs;  // [rows]
};
// `pairs`: the first that many pairs count (an evaluation pass's last batch
// is padded after them); -1: all.
DpoForward dpo_forward(Transformer& model, const Batch& batch, const DpoConfig& config,
                       Transformer* reference = nullptr, int64_t pairs = -1);
// The token weights (Transformer::backward) that make backward(1) add the
// gradient of scale · Σ pair losses, for the batch of the last dpo_forward.
Tensor dpo_token_weights(const Transformer& model, const DpoForward& forward, const Batch& batch, double scale);

// Full-weight DPO's reference: a frozen model (its weights for the caller to
// load) in evaluation mode, with checkpointing, which costs a forward pass
// nothing and keeps only the layer inputs.
std::unique_ptr<Transformer> make_reference_model(const ModelConfig& config, DType dtype, Device device);

// `reference`: as dpo_forward's (kept by the caller for the objective's life).
std::unique_ptr<Objective> dpo_objective(const DpoConfig& config, Transformer* reference = nullptr);

}  // namespace hone
