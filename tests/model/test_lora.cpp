// LoRA: adapter gradients against finite differences in fp64 (with and without
// dropout), a frozen base without gradients, merging, and training.
#include "hone/model/transformer.hpp"
#include "hone/optim/adamw.hpp"
#include "hone/train/step.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

ModelConfig small(const std::string& preset) {
  ModelConfig c = model_preset(preset);
  c.vocab_size = 23;
  c.dim = 16;
  c.n_heads = 4;
  c.n_kv_heads = preset == "llama_tiny" ? 2 : 4;
  c.ffn_dim = 24;
  c.max_seq_len = 16;
  c.n_layers = 2;
  c.init_std = 0.3;
  c.tie_embeddings = false;  // so the output projection can take an adapter
  return c;
}

LoraConfig every_module(double dropout) {
  return {.rank = 3, .alpha = 6, .dropout = dropout, .attn_modules = {"q_proj", "k_proj", "v_proj", "output_proj"},
          .apply_to_mlp = true, .apply_to_output = true};
}

Batch batch(int64_t vocab) {
  std::vector<int32_t> tokens, targets;
  for (int i = 0; i < 20; ++i) {
    tokens.push_back((i * 5 + 1) % int32_t(vocab));
    targets.push_back(i % 7 == 2 ? -100 : (i * 3 + 2) % int32_t(vocab));
  }
  return {Tensor::from(tokens, {2, 10}), Tensor::from(targets, {2, 10})};
}

// B starts at zero, which would make every A gradient zero: give B values.
void randomize_b(Transformer& m) {
  uint64_t seed = 100;
  for (Parameter& p : m.trainable_params().all()) {
    if (p.name.ends_with(".b")) p.value.copy_from(random_tensor(p.shape, p.value.dtype(), ++seed, 0.3));
  }
  m.trainable_params().sync_compute();
}

class LoraGradients : public ::testing::TestWithParam<std::tuple<std::string, double>> {};

TEST_P(LoraGradients, AdaptersMatchFiniteDifferencesAndTheBaseHasNoGradients) {
  const auto [preset, dropout] = GetParam();
  Transformer m(small(preset), DType::f64, Device::cpu(), every_module(dropout));
  m.init_weights(1);
  randomize_b(m);
  EXPECT_FALSE(m.params().grads().defined()) << "frozen base weights must have no gradient buffer";
  for (const Parameter& p : m.params().all()) EXPECT_FALSE(p.grad.defined()) << p.name;
  const Batch b = batch(m.config().vocab_size);
  m.set_dropout_round(7);  // the same masks in every forward of the check
  auto loss = [&] { return m.forward(b.tokens, b.targets).mean(); };
  m.trainable_params().zero_grad();
  const ops::LossSum s = m.forward(b.tokens, b.targets);
  m.backward(1.0 / double(s.tokens));
  size_t checked = 0;
  for (Parameter& p : m.trainable_params().all()) {
    expect_gradient(p.value, p.grad, loss, preset + " " + p.name, 1e-6, 12);
    ++checked;
  }
  // Per layer q, k, v, output_proj and the MLP's (gate,) up and down; plus the output: two tensors each.
  const size_t per_layer = preset == "llama_tiny" ? 7 : 6;
  EXPECT_EQ(checked, 2 * (2 * per_layer + 1));
}

INSTANTIATE_TEST_SUITE_P(Families, LoraGradients,
                         ::testing::Combine(::testing::Values("llama_tiny", "gpt2_tiny"), ::testing::Values(0.0, 0.3)));

TEST(Lora, StartsAsTheBaseModelAndMergesExactly) {
  const ModelConfig c = small("mpt_tiny");
  Transformer base(c, DType::f64);
  base.init_weights(2);
  Transformer adapted(c, DType::f64, Device::cpu(), every_module(0.1));
  adapted.init_weights(2);  // the same base weights; B = 0
  const Batch b = batch(c.vocab_size);
  adapted.set_training(false);
  EXPECT_EQ(base.forward(b.tokens, b.targets).sum, adapted.forward(b.tokens, b.targets).sum);

  randomize_b(adapted);
  const double with_adapters = adapted.forward(b.tokens, b.targets).sum;
  EXPECT_NE(with_adapters, base.forward(b.tokens, b.targets).sum);
  adapted.merge_lora();
  EXPECT_NEAR(adapted.forward(b.tokens, b.targets).sum, with_adapters, 1e-10);
  // After merging, the adapters contribute nothing: the base weights carry them.
  for (const Parameter& p : adapted.trainable_params().all()) {
    if (p.name.ends_with(".b")) {
      EXPECT_EQ(ops::sum_squares(p.value), 0.0) << p.name;
    }
  }
}

TEST(Lora, TrainingMovesOnlyTheAdapters) {
  const ModelConfig c = model_preset("llama_tiny");
  Transformer m(c, DType::bf16, Device::cpu(),
                LoraConfig{.rank = 8, .alpha = 16, .attn_modules = {"q_proj", "v_proj"}, .apply_to_mlp = true});
  m.init_weights(3);
  const auto base_before = m.params().values().to_vector<float>();
  AdamW opt(m.trainable_params(), AdamWConfig{.lr = 1e-2});
  EXPECT_EQ(opt.exp_avg().numel(), m.trainable_params().numel());  // optimizer state for adapters only
  // rank 8 on q, v, gate, up and down of 2 layers (dim 64, 2 KV heads of 16, ffn 192).
  const int64_t per_layer = (8 * 64 + 64 * 8) + (8 * 64 + 32 * 8) + 2 * (8 * 64 + 192 * 8) + (8 * 192 + 64 * 8);
  EXPECT_EQ(m.trainable_params().numel(), 2 * per_layer);
  std::vector<int32_t> tokens(64), targets(64);
  for (int i = 0; i < 64; ++i) tokens[size_t(i)] = (i * 3) % 256, targets[size_t(i)] = (i * 3 + 3) % 256;
  const Batch b{Tensor::from(tokens, {2, 32}), Tensor::from(targets, {2, 32})};
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    last = train_step(m, opt, std::span(&b, 1), 1e-2, 1.0).loss;
    if (step == 0) first = last;
  }
  EXPECT_LT(last, first - 1.0);
  EXPECT_EQ(m.params().values().to_vector<float>(), base_before);
}

TEST(Lora, MemoryIsWhatValidateEstimates) {
  // A frozen base costs its weights only; gradients and AdamW moments exist for
  // the adapters alone (hone validate's estimate, without activations).
  const ModelConfig c = model_preset("llama_125M");
  const LoraConfig lora{.rank = 8, .attn_modules = {"q_proj", "v_proj"}};
  Allocator& cpu = allocator_for(Device::cpu());
  const size_t before = cpu.stats().allocated;
  Transformer m(c, DType::bf16, Device::cpu(), lora);
  AdamW opt(m.trainable_params(), AdamWConfig{});
  const size_t measured = cpu.stats().allocated - before;
  const size_t n = size_t(c.num_params()), adapters = size_t(lora_parameter_count(c, lora));
  EXPECT_EQ(size_t(m.trainable_params().numel()), adapters);
  // Weights (4 B) and their bf16 copy (2 B) for base and adapters; gradients (4 B)
  // and moments (8 B) for the adapters; ALiBi/RoPE tables are not planned yet.
  EXPECT_EQ(measured, 6 * (n + adapters) + 12 * adapters);
  EXPECT_LT(measured, 18 * n * 4 / 10);  // full bf16 fine-tuning needs 18 B/param
}

TEST(Lora, RejectsBadConfigs) {
  const ModelConfig c = model_preset("llama_tiny");
  EXPECT_THROW(Transformer(c, DType::f32, Device::cpu(), LoraConfig{.rank = 0}), Error);
  EXPECT_THROW(Transformer(c, DType::f32, Device::cpu(), LoraConfig{.attn_modules = {"q_proj", "o_proj"}}), Error);
  ModelConfig tied = c;
  tied.tie_embeddings = true;
  EXPECT_THROW(Transformer(tied, DType::f32, Device::cpu(), LoraConfig{.apply_to_output = true}), Error);
}

}  // namespace
}  // namespace hone::test
