// DPO's objective: its gradients against finite differences of the pairs' loss
// in fp64 (with LoRA dropout and label smoothing, for every loss type), and
// its start: adapters that change nothing give every DPO pair loss log 2 and
// zero rewards.
#include <cmath>

#include "hone/train/dpo.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

ModelConfig small_llama() {
  ModelConfig c = model_preset("llama_tiny");
  c.vocab_size = 23;
  c.dim = 16;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 24;
  c.max_seq_len = 16;
  c.n_layers = 2;
  c.init_std = 0.3;
  c.tie_embeddings = false;
  return c;
}

// Two pairs of rows (chosen, rejected): their prompts masked, answers of their own lengths.
Batch pairs(int64_t vocab) {
  const int64_t rows = 4, seq = 8;
  std::vector<int32_t> tokens, targets;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t t = 0; t < seq; ++t) {
      tokens.push_back(int32_t((r * 7 + t * 5 + 1) % vocab));
      const bool answer = t >= 3 && t < 5 + r;
      targets.push_back(answer ? int32_t((r * 3 + t * 2 + 2) % vocab) : ops::kIgnoreIndex);
    }
  }
  return {Tensor::from(tokens, {rows, seq}), Tensor::from(targets, {rows, seq})};
}

LoraConfig adapters(double dropout, bool dora = false) {
  return {.rank = 3, .alpha = 6, .dropout = dropout, .attn_modules = {"q_proj", "v_proj"}, .apply_to_mlp = true,
          .apply_to_output = true, .use_dora = dora};
}

// The gradients of the pairs' loss (summed) by every adapter tensor against
// finite differences. With DoRA the reference is the base too: the adapters
// off, no rescaling. (DoRA's A and B gradients hold the row norms constant, as
// PyTorch's do: only its magnitudes' gradients are exact derivatives of the
// loss.)
void expect_exact_gradients(const DpoConfig& config, double dropout, bool dora) {
  Transformer m(small_llama(), DType::f64, Device::cpu(), adapters(dropout, dora));
  m.init_weights(1);
  uint64_t seed = 10;
  for (Parameter& p : m.trainable_params().all()) {  // B away from zero: the model is not its reference
    if (p.name.ends_with(".b")) p.value.copy_from(random_tensor(p.shape, DType::f64, ++seed, 0.3));
  }
  m.trainable_params().sync_compute();
  const Batch b = pairs(m.config().vocab_size);
  m.set_dropout_round(3);
  const auto loss = [&] { return dpo_forward(m, b, config).sums.loss; };
  m.trainable_params().zero_grad();
  const DpoForward forward = dpo_forward(m, b, config);
  EXPECT_GT(std::abs(forward.sums.chosen_rewards), 1e-3);
  EXPECT_GT(forward.sums.loss, 1e-3);  // RSO: the hinge is not flat here
  m.backward(1.0, {}, dpo_token_weights(m, forward, b, 1.0));
  size_t checked = 0;
  for (Parameter& p : m.trainable_params().all()) {
    if (dora && !p.name.ends_with(".magnitude")) continue;
    expect_gradient(p.value, p.grad, loss, p.name, 1e-6, 12);
    ++checked;
  }
  // A and B (DoRA: m) of q, v, gate, up, down per layer, and the output's.
  EXPECT_EQ(checked, (dora ? 1u : 2u) * (2 * 5 + 1));
}

TEST(Dpo, GradientsMatchFiniteDifferencesOfThePairsLoss) {
  for (const auto& [dropout, dora] : {std::pair{0.0, false}, std::pair{0.3, false}, std::pair{0.3, true}}) {
    SCOPED_TRACE(fmt::format("dropout {}, DoRA {}", dropout, dora));
    expect_exact_gradients({.beta = 0.5, .label_smoothing = 0.1}, dropout, dora);
  }
}

// IPO, RSO's hinge and SimPO's per-token means without a reference.
TEST(Dpo, EveryLossTypesGradientsMatchFiniteDifferences) {
  for (const DpoConfig& config : {DpoConfig{.loss = PreferenceLoss::ipo, .beta = 0.5},
                                  DpoConfig{.loss = PreferenceLoss::rso, .beta = 0.5},
                                  DpoConfig{.loss = PreferenceLoss::simpo, .beta = 2.0, .label_smoothing = 0.1,
                                            .gamma = 0.5}}) {
    SCOPED_TRACE(preference_loss_name(config.loss));
    expect_exact_gradients(config, 0.3, false);
  }
}

// Full-weight DPO: the reference is a frozen copy of the starting weights,
// and every weight's gradient is checked.
TEST(Dpo, WholeModelGradientsAgainstAFrozenReferenceMatchFiniteDifferences) {
  const std::unique_ptr<Transformer> reference = make_reference_model(small_llama(), DType::f64, Device::cpu());
  Transformer m(small_llama(), DType::f64);
  m.init_weights(1);
  for (Parameter& p : reference->params().all()) p.value.copy_from(m.params().get(p.name).value);
  uint64_t seed = 20;
  for (Parameter& p : m.params().all()) {  // moved away from the reference
    ops::add(p.value, random_tensor(p.shape, DType::f64, ++seed, 0.05), p.value);
  }
  m.params().sync_compute();
  const Batch b = pairs(m.config().vocab_size);
  const DpoConfig config{.beta = 0.5, .label_smoothing = 0.1};
  const auto loss = [&] { return dpo_forward(m, b, config, reference.get()).sums.loss; };
  m.params().zero_grad();
  const DpoForward forward = dpo_forward(m, b, config, reference.get());
  EXPECT_GT(std::abs(forward.sums.chosen_rewards), 1e-3);
  m.backward(1.0, {}, dpo_token_weights(m, forward, b, 1.0));
  for (Parameter& p : m.params().all()) expect_gradient(p.value, p.grad, loss, p.name, 1e-6, 8);
  // Without a reference model, the whole model's DPO is refused; SimPO needs none.
  EXPECT_NE(error_of([&] { dpo_forward(m, b, config); }).find("needs a reference model"), std::string::npos);
  EXPECT_NO_THROW(dpo_forward(m, b, {.loss = PreferenceLoss::simpo, .beta = 2.0}));
}

TEST(Dpo, AdaptersThatChangeNothingGiveLogTwoAndZeroRewards) {
  Transformer m(small_llama(), DType::f64, Device::cpu(), adapters(0.0));
  m.init_weights(1);  // B = 0: the model is its reference
  const Batch b = pairs(m.config().vocab_size);
  const DpoForward f = dpo_forward(m, b, {.beta = 0.1, .label_smoothing = 0.2});
  EXPECT_EQ(f.sums.pairs, 2);
  EXPECT_NEAR(f.sums.loss, 2 * std::log(2.0), 1e-12);
  EXPECT_EQ(f.sums.chosen_rewards, 0.0);
  EXPECT_EQ(f.sums.wins, 0.0);  // a tie is not a win
  EXPECT_LT(f.sums.chosen_log_probs, 0.0);
  // IPO starts at (1/(2β))² a pair, RSO at the hinge's 1.
  EXPECT_NEAR(dpo_forward(m, b, {.loss = PreferenceLoss::ipo, .beta = 0.1}).sums.loss, 2 * 25.0, 1e-9);
  EXPECT_NEAR(dpo_forward(m, b, {.loss = PreferenceLoss::rso, .beta = 0.1}).sums.loss, 2 * 1.0, 1e-12);
  const Metrics means = f.sums.means();
  EXPECT_EQ(means.at(2).first, "rewards/accuracies");
  // A forward pass with the adapters off cannot be trained from.
  m.set_adapters_enabled(false);
  m.forward(b.tokens, b.targets);
  m.set_adapters_enabled(true);
  EXPECT_NE(error_of([&] { m.backward(1.0); }).find("adapters off"), std::string::npos);
}

}  // namespace
}  // namespace hone::test
