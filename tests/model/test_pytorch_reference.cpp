// Parity with PyTorch: tests/reference/generate.py builds tiny Llama-3 (GQA, RoPE
// with Llama 3.1 scaling), GPT-2 and MPT models in plain torch with fixed weights
// and records logits, loss, every gradient and the losses of five AdamW steps.
// hone's fp32 path, loaded with the same weights, must agree to 1e-4 relative.
// The LoRA variants (DoRA, DPO) have generators of their own beside it.
#include <fmt/format.h>

#include <array>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "hone/io/safetensors.hpp"
#include "hone/model/transformer.hpp"
#include "hone/train/dpo.hpp"
#include "hone/train/step.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

constexpr double kTolerance = 1e-4;

template <typename E, size_t N>
E parse_name(const nlohmann::json& value, const std::array<E, N>& options, std::string_view (*name)(E),
             const char* key) {
  const std::string text = value.get<std::string>();
  for (E option : options)
    if (name(option) == text) return option;
  fail("reference config: unknown {} '{}'", key, text);
}

// The generator's config, strictly: a missing key throws and a key the test does
// not know fails, so hone cannot silently build a different model than torch did.
ModelConfig config_from_json(const nlohmann::json& j) {
  std::set<std::string> read;
  auto field = [&](const char* key) -> const nlohmann::json& {
    read.insert(key);
    return j.at(key);
  };
  ModelConfig c;
  c.name = field("name").get<std::string>();
  c.family = parse_name(field("family"), std::array{Family::llama, Family::gpt2, Family::mpt}, family_name, "family");
  c.vocab_size = field("vocab_size").get<int64_t>();
  c.dim = field("dim").get<int64_t>();
  c.n_layers = field("n_layers").get<int64_t>();
  c.n_heads = field("n_heads").get<int64_t>();
  c.n_kv_heads = field("n_kv_heads").get<int64_t>();
  c.ffn_dim = field("ffn_dim").get<int64_t>();
  c.max_seq_len = field("max_seq_len").get<int64_t>();
  c.norm = parse_name(field("norm"), std::array{NormKind::rmsnorm, NormKind::layernorm}, norm_name, "norm");
  c.norm_bias = field("norm_bias").get<bool>();
  c.norm_eps = field("norm_eps").get<double>();
  c.position = parse_name(field("position"),
                          std::array{PositionKind::rope, PositionKind::learned, PositionKind::alibi}, position_name,
                          "position");
  c.rope_theta = field("rope_theta").get<double>();
  const nlohmann::json& scaling = field("rope_scaling");
  EXPECT_EQ(scaling.size(), 4u) << "rope_scaling has keys the test does not read: " << scaling.dump();
  c.rope_scaling = {.factor = scaling.at("factor").get<double>(),
                    .low_freq_factor = scaling.at("low_freq_factor").get<double>(),
                    .high_freq_factor = scaling.at("high_freq_factor").get<double>(),
                    .original_max_position = scaling.at("original_max_position").get<int64_t>()};
  c.alibi_bias_max = field("alibi_bias_max").get<double>();
  c.mlp = parse_name(field("mlp"), std::array{MlpKind::swiglu, MlpKind::gelu, MlpKind::gelu_tanh}, mlp_name, "mlp");
  c.linear_bias = field("linear_bias").get<bool>();
  c.tie_embeddings = field("tie_embeddings").get<bool>();
  for (const auto& [key, value] : j.items()) EXPECT_TRUE(read.contains(key)) << "config key '" << key << "' unread";
  return c;
}

struct Reference {
  std::unique_ptr<SafetensorsFile> file;
  ModelConfig config;
  nlohmann::json adamw;
  Tensor tokens, targets;

  explicit Reference(const std::string& family)
      : file(std::make_unique<SafetensorsFile>(source_path("tests/reference/" + family + ".safetensors"))),
        config(config_from_json(nlohmann::json::parse(file->metadata().at("config")))),
        adamw(nlohmann::json::parse(file->metadata().at("adamw"))),
        tokens(file->load("tokens")),
        targets(file->load("targets")) {}

  // A model of `config` holding the reference weights.
  std::unique_ptr<Transformer> model(const ModelConfig& model_config) const {
    auto m = std::make_unique<Transformer>(model_config, DType::f32);
    for (Parameter& p : m->params().all()) p.value.copy_from(file->load("param." + p.name));
    m->params().sync_compute();
    return m;
  }
};

struct Errors {
  double logits = 0, loss = 0, grads = 0;
  std::string worst_grad;
};

// Forward and backward of `model` on the reference batch, against the reference.
Errors forward_backward_errors(const Reference& ref, Transformer& model) {
  model.params().zero_grad();
  const ops::LossSum loss = model.forward(ref.tokens, ref.targets);
  Errors e;
  e.logits = relative_error(model.logits(), ref.file->load("logits"));
  e.loss = relative_error(Tensor::from(std::vector<float>{float(loss.mean())}, {1}), ref.file->load("loss"));
  model.backward(1.0 / double(loss.tokens));
  for (const Parameter& p : model.params().all()) {
    const double err = relative_error(p.grad, ref.file->load("grad." + p.name));
    if (err >= e.grads) {
      e.grads = err;
      e.worst_grad = p.name;
    }
  }
  return e;
}

class PytorchReference : public ::testing::TestWithParam<std::string> {};

TEST_P(PytorchReference, DeclaresExactlyTheReferenceParameters) {
  const Reference ref(GetParam());
  Transformer model(ref.config, DType::f32);
  std::set<std::string> hone_names;
  for (const Parameter& p : model.params().all()) {
    hone_names.insert(p.name);
    for (const char* kind : {"param.", "grad."}) {
      const std::string name = kind + p.name;
      ASSERT_TRUE(ref.file->contains(name)) << name << " is missing from the reference";
      EXPECT_EQ(ref.file->entry(name).shape, p.shape) << name;
      EXPECT_EQ(ref.file->entry(name).dtype, DType::f32) << name;
    }
  }
  for (const std::string& name : ref.file->names()) {
    for (std::string_view kind : {"param.", "grad."}) {
      if (name.starts_with(kind)) {
        EXPECT_TRUE(hone_names.contains(name.substr(kind.size()))) << name << " is not a parameter of hone's model";
      }
    }
  }
}

TEST_P(PytorchReference, ForwardAndBackwardMatch) {
  const Reference ref(GetParam());
  auto model = ref.model(ref.config);
  const Errors e = forward_backward_errors(ref, *model);
  fmt::print("{}: relative errors logits {:.2e}, loss {:.2e}, gradients {:.2e} (worst {})\n", GetParam(), e.logits,
             e.loss, e.grads, e.worst_grad);
  EXPECT_LE(e.logits, kTolerance) << "logits";
  EXPECT_LE(e.loss, kTolerance) << "loss";
  EXPECT_LE(e.grads, kTolerance) << "gradient of " << e.worst_grad;
}

TEST_P(PytorchReference, AdamWStepsMatch) {
  const Reference ref(GetParam());
  auto model = ref.model(ref.config);
  const nlohmann::json& o = ref.adamw;
  AdamW optimizer(model->params(), AdamWConfig{.lr = o.at("lr").get<double>(),
                                               .beta1 = o.at("beta1").get<double>(),
                                               .beta2 = o.at("beta2").get<double>(),
                                               .eps = o.at("eps").get<double>(),
                                               .weight_decay = o.at("weight_decay").get<double>()});
  const std::vector<Batch> batch{{ref.tokens, ref.targets}};
  std::vector<float> losses;
  for (int64_t step = 0; step < o.at("steps").get<int64_t>(); ++step) {
    losses.push_back(float(train_step(*model, optimizer, batch, optimizer.config().lr,
                                      o.at("max_grad_norm").get<double>())
                               .loss));
  }
  const Tensor actual = Tensor::from(losses, {int64_t(losses.size())});
  const double err = relative_error(actual, ref.file->load("adamw_losses"));
  fmt::print("{}: relative error of the {} AdamW losses {:.2e}\n", GetParam(), losses.size(), err);
  EXPECT_LE(err, kTolerance) << "AdamW losses";
}

// The tolerance must tell apart models that differ in one detail: the variant of
// each family that an easy mistake would produce does not pass.
TEST_P(PytorchReference, RejectsANearbyModel) {
  const Reference ref(GetParam());
  ModelConfig wrong = ref.config;
  switch (wrong.family) {
    case Family::llama: wrong.rope_scaling.factor = 1.0; break;  // RoPE without Llama 3.1 scaling
    case Family::gpt2: wrong.mlp = MlpKind::gelu; break;         // exact GELU instead of tanh
    case Family::mpt: wrong.alibi_bias_max = 16.0; break;        // other ALiBi slopes
  }
  auto model = ref.model(wrong);
  const Errors e = forward_backward_errors(ref, *model);
  fmt::print("{} variant: relative errors logits {:.2e}, gradients {:.2e}\n", GetParam(), e.logits, e.grads);
  EXPECT_GT(std::max(e.logits, e.grads), kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Families, PytorchReference, ::testing::Values("llama", "gpt2", "mpt"),
                         [](const auto& info) { return info.param; });

// DoRA adapters on every projection (tests/reference/generate_dora.py): the
// logits, the loss and the gradients of A, B and the magnitudes, with the row
// norms held constant in backward as torchtune and PEFT hold them.
class DoraReference : public ::testing::TestWithParam<std::string> {};

TEST_P(DoraReference, ForwardAndAdapterGradientsMatch) {
  const SafetensorsFile file(source_path("tests/reference/dora_" + GetParam() + ".safetensors"));
  const nlohmann::json lora_json = nlohmann::json::parse(file.metadata().at("lora"));
  const LoraConfig lora{.rank = lora_json.at("rank").get<int64_t>(),
                        .alpha = lora_json.at("alpha").get<double>(),
                        .dropout = 0.0,
                        .attn_modules = lora_json.at("attn_modules").get<std::vector<std::string>>(),
                        .apply_to_mlp = lora_json.at("apply_to_mlp").get<bool>(),
                        .use_dora = true};
  Transformer model(config_from_json(nlohmann::json::parse(file.metadata().at("config"))), DType::f32, Device::cpu(),
                    lora);
  for (Parameter& p : model.params().all()) p.value.copy_from(file.load("param." + p.name));
  model.params().sync_compute();
  size_t adapters = 0;
  for (Parameter& p : model.trainable_params().all()) {
    p.value.copy_from(file.load("adapter." + p.name));
    ++adapters;
  }
  model.trainable_params().sync_compute();
  size_t stored = 0;
  for (const std::string& name : file.names()) stored += name.starts_with("adapter.");
  ASSERT_EQ(adapters, stored) << "hone's DoRA tensors and the reference's differ in number";

  model.trainable_params().zero_grad();
  const ops::LossSum loss = model.forward(file.load("tokens"), file.load("targets"));
  const double logits = relative_error(model.logits(), file.load("logits"));
  const double loss_error =
      relative_error(Tensor::from(std::vector<float>{float(loss.mean())}, {1}), file.load("loss"));
  model.backward(1.0 / double(loss.tokens));
  double grads = 0;
  std::string worst;
  for (const Parameter& p : model.trainable_params().all()) {
    const double err = relative_error(p.grad, file.load("grad." + p.name));
    if (err >= grads) grads = err, worst = p.name;
  }
  fmt::print("dora {}: relative errors logits {:.2e}, loss {:.2e}, gradients {:.2e} (worst {})\n", GetParam(), logits,
             loss_error, grads, worst);
  EXPECT_LE(logits, kTolerance);
  EXPECT_LE(loss_error, kTolerance);
  EXPECT_LE(grads, kTolerance) << "gradient of " << worst;
}

INSTANTIATE_TEST_SUITE_P(Families, DoraReference, ::testing::Values("llama", "gpt2"),
                         [](const auto& info) { return info.param; });

// lora_dpo's objective against torchtune's preference losses
// (generate_dpo.py): two pairs of rows, the loss, each pair's rewards and the
// adapters' gradients, for each loss.type.
class DpoReference : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(DpoReference, LossRewardsAndAdapterGradientsMatch) {
  const auto& [family, type] = GetParam();
  const SafetensorsFile file(source_path("tests/reference/dpo_" + family + ".safetensors"));
  const nlohmann::json lora_json = nlohmann::json::parse(file.metadata().at("lora"));
  const nlohmann::json settings = nlohmann::json::parse(file.metadata().at("losses")).at(type);
  const LoraConfig lora{.rank = lora_json.at("rank").get<int64_t>(),
                        .alpha = lora_json.at("alpha").get<double>(),
                        .dropout = 0.0,
                        .attn_modules = lora_json.at("attn_modules").get<std::vector<std::string>>(),
                        .apply_to_mlp = lora_json.at("apply_to_mlp").get<bool>()};
  const DpoConfig dpo{.loss = parse_preference_loss(type),
                      .beta = settings.at("beta").get<double>(),
                      .label_smoothing = settings.at("label_smoothing").get<double>(),
                      .gamma = settings.at("gamma").get<double>()};
  Transformer model(config_from_json(nlohmann::json::parse(file.metadata().at("config"))), DType::f32, Device::cpu(),
                    lora);
  for (Parameter& p : model.params().all()) p.value.copy_from(file.load("param." + p.name));
  model.params().sync_compute();
  for (Parameter& p : model.trainable_params().all()) p.value.copy_from(file.load("adapter." + p.name));
  model.trainable_params().sync_compute();

  const Batch batch{file.load("tokens"), file.load("targets")};
  model.trainable_params().zero_grad();
  const DpoForward forward = dpo_forward(model, batch, dpo);
  const double pairs = double(forward.sums.pairs);
  model.backward(1.0, {}, dpo_token_weights(model, forward, batch, 1.0 / pairs));
  const double loss_error =
      relative_error(Tensor::from(std::vector<float>{float(forward.sums.loss / pairs)}, {1}), file.load(type + ".loss"));
  // Σ over the pairs of each reward, against the reference's per-pair values.
  const auto sum_of = [&](const std::string& name) {
    double sum = 0;
    for (float r : file.load(type + "." + name).to_vector<float>()) sum += r;
    return sum;
  };
  EXPECT_NEAR(forward.sums.chosen_rewards, sum_of("chosen_rewards"), kTolerance * std::abs(sum_of("chosen_rewards")));
  EXPECT_NEAR(forward.sums.rejected_rewards, sum_of("rejected_rewards"),
              kTolerance * std::abs(sum_of("rejected_rewards")));
  double grads = 0;
  std::string worst;
  for (const Parameter& p : model.trainable_params().all()) {
    const double err = relative_error(p.grad, file.load(type + ".grad." + p.name));
    if (err >= grads) grads = err, worst = p.name;
  }
  fmt::print("{} {}: relative errors loss {:.2e}, gradients {:.2e} (worst {})\n", type, family, loss_error, grads,
             worst);
  EXPECT_LE(loss_error, kTolerance);
  EXPECT_LE(grads, kTolerance) << "gradient of " << worst;
}

INSTANTIATE_TEST_SUITE_P(FamiliesAndLosses, DpoReference,
                         ::testing::Combine(::testing::Values("llama", "gpt2"),
                                            ::testing::Values("dpo", "ipo", "rso", "simpo")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

}  // namespace
}  // namespace hone::test
