// The whole Transformer: every parameter gradient against finite differences in
// fp64 for each family, bf16 mixed precision against fp32, memory planning,
// reproducibility, and the shapes of the built-in presets.
#include <cmath>

#include "hone/core/rng.hpp"
#include "hone/model/transformer.hpp"
#include "hone/train/step.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

// A small model of each family whose gradients are cheap to check numerically.
ModelConfig small(const std::string& variant) {
  ModelConfig c;
  if (variant.starts_with("llama")) {
    c = model_preset("llama_tiny");
    c.n_kv_heads = 2;  // GQA
    c.ffn_dim = 24;
    c.rope_theta = 100.0;
    // Scaling with all three regimes (kept / blended / divided) at head_dim 4... 8.
    c.rope_scaling = {.factor = 4.0, .low_freq_factor = 1.0, .high_freq_factor = 4.0, .original_max_position = 32};
    c.tie_embeddings = variant == "llama_tied";
  } else {
    c = model_preset(variant == "gpt2" ? "gpt2_tiny" : "mpt_tiny");
    c.n_kv_heads = 4;
    c.ffn_dim = 48;
  }
  c.vocab_size = 29;
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.max_seq_len = 16;
  c.init_std = 0.3;  // large weights: every nonlinearity works away from its linear regime
  return c;
}

Batch random_batch(int64_t batch, int64_t seq, int64_t vocab, uint64_t seed, bool mask_some = true) {
  std::vector<int32_t> tokens, targets;
  Generator g(seed);
  for (int64_t i = 0; i < batch * seq; ++i) {
    tokens.push_back(int32_t(g.next_below(uint64_t(vocab))));
    targets.push_back(mask_some && i % 5 == 3 ? ops::kIgnoreIndex : int32_t(g.next_below(uint64_t(vocab))));
  }
  return {Tensor::from(tokens, {batch, seq}), Tensor::from(targets, {batch, seq})};
}

class ModelGradients : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelGradients, EveryParameterMatchesFiniteDifferencesInFp64) {
  const ModelConfig config = small(GetParam());
  Transformer model(config, DType::f64);
  model.init_weights(3);
  const Batch b = random_batch(2, 11, config.vocab_size, 4);
  auto loss = [&] { return model.forward(b.tokens, b.targets).mean(); };
  model.params().zero_grad();
  const ops::LossSum s = model.forward(b.tokens, b.targets);
  model.backward(1.0 / double(s.tokens));
  for (Parameter& p : model.params().all()) {
    expect_gradient(p.value, p.grad, loss, GetParam() + " " + p.name, 1e-6, 24);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ModelGradients, ::testing::Values("llama", "llama_tied", "gpt2", "mpt"));

// Training tells forward() the loss scale: the loss gradient is then computed in
// the forward pass, and every gradient comes out as from the separate passes
// (to rounding).
TEST(Transformer, LossGradientInTheForwardPassGivesTheSameGradients) {
  for (const std::string variant : {"llama_tied", "gpt2"}) {
    const ModelConfig config = small(variant);
    const Batch b = random_batch(2, 11, config.vocab_size, 4);
    Tensor grads[2];
    double losses[2];
    for (const bool fused : {false, true}) {
      Transformer model(config, DType::f32);
      model.init_weights(3);
      model.params().zero_grad();
      const double scale = 1.0 / 9;
      const ops::LossSum s = model.forward(b.tokens, b.targets, {}, fused ? std::optional(scale) : std::nullopt);
      EXPECT_EQ(s.tokens, 18);
      losses[fused] = s.sum;
      model.backward(scale);
      grads[fused] = model.params().grads().clone();
    }
    // The fused loss takes each exp once, the two passes twice: equal to f32 rounding.
    EXPECT_NEAR(losses[1], losses[0], 1e-6 * losses[0]) << variant;
    expect_close(grads[1], grads[0], 1e-5, variant);
  }
  const ModelConfig config = small("llama");
  Transformer model(config, DType::f32);
  model.init_weights(3);
  const Batch b = random_batch(1, 5, config.vocab_size, 4);
  model.forward(b.tokens, b.targets, {}, 0.5);
  EXPECT_THROW(model.backward(0.25), Error);  // the logits hold the gradient for 0.5
}

// Row-wise work in chunks of rows: 13 x 16 rows in chunks of 64 (the smallest:
// 64, 64, 64, 16) against all rows at once: the output head and the loss, and
// under activation checkpointing the MLP too. With the loss scale known in the
// forward pass (training: each chunk's gradient right after its loss) and
// without (backward computes each chunk's logits again); LoRA adapters on the
// MLP and the output projection, with dropout: each chunk gets its rows' masks.
TEST(Transformer, ChunksOfRowsGiveTheSameLossAndGradients) {
  struct Case {
    std::string variant;
    std::optional<LoraConfig> lora;
  };
  const LoraConfig lora{.rank = 3, .dropout = 0.3, .apply_to_mlp = true, .apply_to_output = true};
  for (const Case& k : {Case{"llama_tied", {}}, Case{"gpt2", {}}, Case{"llama", lora}}) {
    const ModelConfig config = small(k.variant);
    const Batch b = random_batch(13, 16, config.vocab_size, 6);
    const double scale = 1.0 / double(count_targets(b.targets));
    for (const bool scale_in_forward : {true, false}) {
      SCOPED_TRACE(k.variant + (k.lora ? " with LoRA" : "") + (scale_in_forward ? ", scale in forward" : ""));
      auto run = [&](size_t chunk_bytes, bool checkpointing) {
        Transformer m(config, DType::f64, Device::cpu(), k.lora);
        m.init_weights(7);
        uint64_t seed = 8;
        for (Parameter& p : m.trainable_params().all()) {  // B = 0 would leave A's gradients 0
          if (k.lora && p.name.ends_with(".b")) p.value.copy_from(random_tensor(p.shape, p.value.dtype(), ++seed, 0.3));
        }
        m.trainable_params().sync_compute();
        m.set_chunk_bytes(chunk_bytes);
        m.set_activation_checkpointing(checkpointing);
        m.set_dropout_round(2);
        m.trainable_params().zero_grad();
        const ops::LossSum s =
            m.forward(b.tokens, b.targets, {}, scale_in_forward ? std::optional(scale) : std::nullopt);
        const Tensor losses = m.token_losses().clone();
        m.backward(scale);
        return std::tuple(s.sum, losses, m.trainable_params().grads().clone());
      };
      const auto [whole_loss, whole_losses, whole_grads] = run(kNoChunks, false);
      for (const bool checkpointing : {false, true}) {
        SCOPED_TRACE(checkpointing ? "checkpointing: the MLP in chunks too" : "the head in chunks");
        const auto [loss, losses, grads] = run(1, checkpointing);
        EXPECT_NEAR(loss, whole_loss, 1e-12 * whole_loss);
        EXPECT_LE(relative_error(losses, whole_losses), 1e-12);
        EXPECT_LE(relative_error(grads, whole_grads), 1e-12);
      }
    }
    // The plan: 64-row chunks of logits, and of the MLP's working set under checkpointing.
    for (const bool checkpointing : {false, true}) {
      const ActivationOptions options{.checkpointing = checkpointing, .chunk_bytes = 1};
      Arena arena(activation_bytes(config, DType::f64, 13, 16, options), Device::cpu());
      const Activations a = plan_activations(config, DType::f64, 13, 16, arena, options);
      EXPECT_EQ(a.logits.shape(), (Shape{64, config.vocab_size}));
      EXPECT_EQ(a.mlp_rows, checkpointing ? 64 : 13 * 16);
      EXPECT_EQ(a.layers[0].mlp_up.numel(), a.mlp_rows * config.mlp_up_dim());
      EXPECT_EQ(a.d_mlp_act.numel(), a.mlp_rows * config.ffn_dim);
    }
  }
  // Logits are whole, or not handed out: forward without targets needs them all.
  const ModelConfig config = small("gpt2");
  Transformer m(config, DType::f32);
  m.init_weights(8);
  m.set_chunk_bytes(1);
  const Batch b = random_batch(13, 16, config.vocab_size, 9);
  m.forward(b.tokens, b.targets);
  EXPECT_THROW(m.logits(), Error);
  EXPECT_THROW(m.forward(b.tokens), Error);
  m.set_chunk_bytes(kNoChunks);
  m.forward(b.tokens);
  EXPECT_EQ(m.logits().shape(), (Shape{13 * 16, config.vocab_size}));
}

// Padded rows of logits (on a GPU): GPT-2's 50257 classes take rows of 50264
// bf16 (whole 16-byte groups) or 50260 f32, in the plan and in the chunks'
// byte budget; Llama 3's 128256 need no padding.
TEST(Transformer, PlanPadsRowsOfLogitsWhereAsked) {
  ModelConfig c = model_preset("gpt2_124M");
  const ActivationOptions padded{.padded_logit_rows = true};
  const auto row_of_logits = [&](DType dtype, const ActivationOptions& options) {
    Arena arena(activation_bytes(c, dtype, 1, 64, options), Device::cpu());
    return plan_activations(c, dtype, 1, 64, arena, options).logits.size(1);
  };
  for (const auto& [dtype, row] : {std::pair{DType::bf16, 50264}, std::pair{DType::f32, 50260}}) {
    EXPECT_EQ(row_of_logits(dtype, padded), row) << dtype_name(dtype);
    EXPECT_EQ(row_of_logits(dtype, {}), 50257) << dtype_name(dtype);
  }
  c.max_seq_len = 4096;
  // A budget of 640 packed rows holds 639 padded ones: 576, a multiple of 64.
  const size_t budget = 50257 * 2 * 640;
  EXPECT_EQ(logits_chunk_rows(c, DType::bf16, 1, 4096, {.chunk_bytes = budget}), 640);
  EXPECT_EQ(logits_chunk_rows(c, DType::bf16, 1, 4096, {.chunk_bytes = budget, .padded_logit_rows = true}), 576);
  c.vocab_size = 128256;
  EXPECT_EQ(row_of_logits(DType::bf16, padded), 128256);
}

// A trained head's weight gradient is read and written once a chunk of logits:
// its chunks hold kTrainedHeadChunkRows rows where the byte budget would give
// fewer (32768 classes in bf16: 1024 rows in 64 MiB); a frozen head's keep to
// the budget, and so does a budget set on the model.
TEST(Transformer, TrainedHeadsChunksHoldAtLeast2048Rows) {
  ModelConfig c = model_preset("llama_tiny");
  c.vocab_size = 32768;
  c.max_seq_len = 2048;
  ASSERT_EQ(kTrainedHeadChunkRows, 2048);
  EXPECT_EQ(logits_chunk_rows(c, DType::bf16, 2, 2048, {}), 1024);
  EXPECT_EQ(logits_chunk_rows(c, DType::bf16, 2, 2048, {.head_weight_gradient = true}), 2048);
  EXPECT_EQ(logits_chunk_rows(c, DType::bf16, 1, 1000, {.head_weight_gradient = true}), 1000);  // all rows
  const size_t trained = activation_bytes(c, DType::bf16, 2, 2048, {.head_weight_gradient = true});
  const size_t budgeted = activation_bytes(c, DType::bf16, 2, 2048, {});
  EXPECT_EQ(trained - budgeted, size_t(1024 * c.vocab_size * 2));
  for (const BaseWeights base : {BaseWeights::trainable, BaseWeights::frozen}) {
    Transformer m(c, DType::bf16, Device::cpu(), std::nullopt, {}, base);
    m.reserve(2, 2048);
    EXPECT_EQ(m.activation_bytes(), base == BaseWeights::trainable ? trained : budgeted);
    m.set_chunk_bytes(kChunkBytes);
    m.reserve(2, 2048);
    EXPECT_EQ(m.activation_bytes(), budgeted);
  }
}

TEST(Transformer, Bf16MixedPrecisionTracksFp32) {
  for (const char* name : {"llama_tiny", "gpt2_tiny", "mpt_tiny"}) {
    const ModelConfig config = model_preset(name);
    const Batch b = random_batch(4, 64, config.vocab_size, 5, false);
    std::vector<double> losses[2];
    int run = 0;
    for (DType dtype : {DType::f32, DType::bf16}) {
      Transformer model(config, dtype);
      model.init_weights(6);
      AdamW opt(model.params(), AdamWConfig{.lr = 3e-3});
      for (int step = 0; step < 12; ++step) {
        losses[run].push_back(train_step(model, opt, std::span(&b, 1), 3e-3, 1.0).loss);
      }
      ++run;
    }
    // bf16 keeps 8 bits of mantissa: per-step losses agree to about 1%, and both
    // runs learn the batch.
    for (size_t i = 0; i < losses[0].size(); ++i) {
      EXPECT_NEAR(losses[1][i], losses[0][i], 0.01 * losses[0][i]) << name << " step " << i;
    }
    EXPECT_LT(losses[0].back(), losses[0].front() - 0.3) << name;
    EXPECT_LT(losses[1].back(), losses[1].front() - 0.3) << name;
  }
}

// A frozen model (inference, DPO's reference) holds its weights in the compute
// dtype alone and no gradients, and computes what the trainable model computes
// from the same weights, bit for bit. (The trained model's weights are made
// bf16 values first: in bf16 it adds its fp32 biases and norm weights as they
// are, where a frozen model has them in bf16.)
TEST(Transformer, FrozenModelsHoldOnlyTheComputeWeightsAndComputeTheSame) {
  for (const char* name : {"llama_tiny", "gpt2_tiny", "mpt_tiny"}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(fmt::format("{} {}", name, dtype_name(dtype)));
      const ModelConfig config = model_preset(name);
      const Batch b = random_batch(2, 32, config.vocab_size, 5);
      Transformer trained(config, dtype);
      trained.init_weights(6);
      for (Parameter& p : trained.params().all()) p.value.copy_from(ops::cast_to(p.compute, p.value.dtype()));
      Transformer frozen(config, dtype, Device::cpu(), std::nullopt, {}, BaseWeights::frozen);
      for (Parameter& p : frozen.params().all()) p.value.copy_from(trained.params().get(p.name).compute);
      frozen.params().sync_compute();
      EXPECT_EQ(frozen.params().values().dtype(), dtype);
      EXPECT_EQ(frozen.params().values().nbytes(), size_t(config.num_params()) * dtype_size(dtype));
      EXPECT_FALSE(frozen.params().all().front().grad.defined());
      EXPECT_TRUE(frozen.trainable_params().all().empty());
      EXPECT_EQ(frozen.forward(b.tokens, b.targets).sum, trained.forward(b.tokens, b.targets).sum);
      EXPECT_EQ(frozen.token_losses().to_vector<float>(), trained.token_losses().to_vector<float>());
      EXPECT_NE(error_of([&] { frozen.backward(1.0); }).find("frozen model"), std::string::npos);
    }
  }
}

TEST(Transformer, RunsAreReproducible) {
  const ModelConfig config = model_preset("llama_tiny");
  const Batch b = random_batch(2, 32, config.vocab_size, 7);
  auto train = [&] {
    Transformer model(config, DType::f32);
    model.init_weights(8);
    AdamW opt(model.params(), AdamWConfig{});
    std::vector<double> losses;
    for (int step = 0; step < 3; ++step) losses.push_back(train_step(model, opt, std::span(&b, 1), 1e-3, 1.0).loss);
    return std::pair(losses, model.params().values().to_vector<float>());
  };
  EXPECT_EQ(train(), train());
}

// zero_grad() leaves last step's gradients in place and marks them stale: the
// backward pass's first write of each replaces them (a GEMM with beta 0) or
// zeroes them first, and what nothing wrote reads as zero. Gradients then are
// bit for bit those of a zeroed buffer, whatever it held: for every family,
// tied or not, biases, learned positions, LoRA adapters, the head and the MLP in
// row chunks, and two micro-batches added up.
TEST(Transformer, StaleGradientsAreReplacedNotAddedTo) {
  struct Case {
    std::string variant;
    std::optional<LoraConfig> lora;
  };
  const LoraConfig lora{.rank = 3, .apply_to_mlp = true, .apply_to_output = true};
  for (const Case& k : {Case{"llama", {}}, Case{"llama_tied", {}}, Case{"gpt2", {}}, Case{"mpt", {}},
                        Case{"llama", lora}}) {
    const ModelConfig config = small(k.variant);
    const Batch batches[2] = {random_batch(3, 16, config.vocab_size, 21), random_batch(3, 16, config.vocab_size, 22)};
    for (const bool chunked : {false, true}) {
      SCOPED_TRACE(k.variant + (k.lora ? " with LoRA" : "") + (chunked ? ", in row chunks" : ""));
      auto grads = [&](bool stale) {
        Transformer m(config, DType::f64, Device::cpu(), k.lora);
        m.init_weights(7);
        if (chunked) {
          m.set_chunk_bytes(1);
          m.set_activation_checkpointing(true);
        }
        ParameterSet& trained = m.trainable_params();
        if (stale) {
          trained.grads().copy_from(random_tensor(trained.grads().shape(), DType::f64, 5, 100.0));
          trained.zero_grad();
        } else {
          trained.grads().zero_();
        }
        for (const Batch& b : batches) {
          m.forward(b.tokens, b.targets);
          m.backward(0.01);
        }
        return trained.grads().clone();
      };
      const Tensor fresh = grads(false), stale = grads(true);
      EXPECT_EQ(fresh.to_vector<double>(), stale.to_vector<double>());
    }
  }
}

TEST(Transformer, GradientAccumulationEqualsOneLargeBatch) {
  const ModelConfig config = model_preset("gpt2_tiny");
  const Batch whole = random_batch(4, 16, config.vocab_size, 9);
  auto rows = [](const Tensor& t, int64_t from) { return t.slice(from * 16, {2, 16}).clone(); };
  const Batch halves[2] = {{rows(whole.tokens, 0), rows(whole.targets, 0)},
                           {rows(whole.tokens, 2), rows(whole.targets, 2)}};
  auto grads_after = [&](std::span<const Batch> batches) {
    Transformer model(config, DType::f64);
    model.init_weights(10);
    AdamW opt(model.params(), AdamWConfig{});
    const double loss = train_step(model, opt, batches, 0.0, 0.0).loss;  // lr 0: keep the weights
    return std::pair(loss, model.params().grads().clone());
  };
  auto [loss_whole, grad_whole] = grads_after(std::span(&whole, 1));
  auto [loss_split, grad_split] = grads_after(std::span(halves, 2));
  EXPECT_NEAR(loss_split, loss_whole, 1e-12);
  expect_close(grad_split, grad_whole, 1e-12, "accumulated gradients");
}

TEST(Transformer, ActivationMemoryIsPlannedUpFront) {
  const ModelConfig config = model_preset("llama_tiny");
  Transformer model(config, DType::f32);
  Allocator& cpu = allocator_for(Device::cpu());
  const size_t before = cpu.stats().allocated;
  model.reserve(2, 64);
  const size_t planned = activation_bytes(config, DType::f32, 2, 64);
  EXPECT_EQ(model.activation_bytes(), planned);
  const size_t rope_tables = 2 * 64 * size_t(config.head_dim() / 2) * sizeof(float);
  EXPECT_EQ(cpu.stats().allocated - before, planned + rope_tables);
  // A step allocates nothing large beyond the plan: peak stays within the plan plus
  // small per-call scratch (reduction partials, attention tiles).
  cpu.reset_peak();
  const Batch b = random_batch(2, 64, config.vocab_size, 11);
  AdamW opt(model.params(), AdamWConfig{});
  const size_t with_optimizer = cpu.stats().allocated;
  train_step(model, opt, std::span(&b, 1), 1e-3, 1.0);
  EXPECT_LT(cpu.stats().peak_allocated - with_optimizer, planned / 10);
  // The plan grows linearly with the batch, and bf16 halves the activations.
  const double ratio = double(activation_bytes(config, DType::f32, 4, 64)) / double(planned);
  EXPECT_NEAR(ratio, 2.0, 0.01);
  EXPECT_LT(activation_bytes(config, DType::bf16, 2, 64), planned * 6 / 10);
}

// Fine-tuning batches change length from step to step: a shorter one is planned
// in the memory already held (nothing allocated), a longer one grows it, and
// each gives what a model planned for it alone gives.
TEST(Transformer, ShorterBatchesArePlannedInTheMemoryHeld) {
  const ModelConfig config = small("llama");
  const Batch longer = random_batch(2, 16, config.vocab_size, 31), shorter = random_batch(2, 8, config.vocab_size, 32);
  auto loss_and_grads = [](Transformer& m, const Batch& b) {
    m.params().zero_grad();
    const ops::LossSum loss = m.forward(b.tokens, b.targets);
    m.backward(1.0 / double(loss.tokens));
    return std::pair(loss.sum, m.params().grads().to_vector<double>());
  };
  Transformer reused(config, DType::f64), fresh(config, DType::f64);
  reused.init_weights(3);
  fresh.init_weights(3);
  Allocator& cpu = allocator_for(Device::cpu());
  loss_and_grads(reused, longer);
  const size_t held = cpu.stats().allocated;
  const auto reused_shorter = loss_and_grads(reused, shorter);
  EXPECT_EQ(cpu.stats().allocated, held);
  EXPECT_EQ(reused.activation_bytes(), activation_bytes(config, DType::f64, 2, 8));
  EXPECT_EQ(reused_shorter, loss_and_grads(fresh, shorter));
  // Back to the longer batch in the same memory, and a larger batch grows it.
  EXPECT_EQ(loss_and_grads(reused, longer), loss_and_grads(fresh, longer));
  const size_t before_growing = cpu.stats().allocated;
  loss_and_grads(reused, random_batch(4, 16, config.vocab_size, 33));
  EXPECT_GT(cpu.stats().allocated, before_growing);
}

TEST(Transformer, ActivationCheckpointingGivesIdenticalGradientsInLessMemory) {
  for (const char* name : {"llama_tiny", "gpt2_tiny", "mpt_tiny"}) {
    const ModelConfig c = model_preset(name);
    const Batch b = random_batch(2, 48, c.vocab_size, 12);
    auto gradients = [&](bool checkpointing, std::optional<LoraConfig> lora) {
      Transformer m(c, DType::f32, Device::cpu(), lora);
      m.init_weights(13);
      m.set_activation_checkpointing(checkpointing);
      m.set_dropout_round(3);
      const ops::LossSum s = m.forward(b.tokens, b.targets);
      m.backward(1.0 / double(s.tokens));
      return std::pair(s.sum, m.trainable_params().grads().to_vector<float>());
    };
    EXPECT_EQ(gradients(true, std::nullopt), gradients(false, std::nullopt)) << name;
    const LoraConfig lora{.rank = 4, .dropout = 0.2, .apply_to_mlp = true};
    EXPECT_EQ(gradients(true, lora), gradients(false, lora)) << name << " with LoRA";
  }
  // Memory: one layer's working set plus one [batch, seq, dim] input per layer.
  ModelConfig c = model_preset("llama_125M");
  const int64_t B = 4, T = 256, bytes_per_input = B * T * c.dim * 2;  // bf16
  const size_t full = activation_bytes(c, DType::bf16, B, T);
  const size_t checkpointed = activation_bytes(c, DType::bf16, B, T, {.checkpointing = true});
  ModelConfig one_layer = c;
  one_layer.n_layers = 1;
  const size_t working_set = activation_bytes(one_layer, DType::bf16, B, T);
  EXPECT_LE(checkpointed, working_set + size_t((c.n_layers - 1) * bytes_per_input) + 64 * 256);
  EXPECT_LT(checkpointed, full / 2);
}

// Offloading keeps the checkpointed layer inputs on the host: the same
// numbers, with two inputs planned on the device instead of one per layer.
TEST(Transformer, ActivationOffloadingKeepsTwoLayerInputsOnTheDevice) {
  for (const char* name : {"llama_tiny", "gpt2_tiny"}) {
    ModelConfig c = model_preset(name);
    c.n_layers = 4;
    const Batch b = random_batch(2, 48, c.vocab_size, 14);
    const LoraConfig lora{.rank = 4, .dropout = 0.2, .apply_to_mlp = true};
    for (const std::optional<LoraConfig>& adapters : {std::optional<LoraConfig>(), std::optional(lora)}) {
      SCOPED_TRACE(std::string(name) + (adapters ? " with LoRA" : ""));
      auto run = [&](bool offloading) {
        Transformer m(c, DType::f32, Device::cpu(), adapters);
        m.init_weights(15);
        m.set_activation_checkpointing(true);
        m.set_activation_offloading(offloading);
        m.set_dropout_round(4);
        const ops::LossSum s = m.forward(b.tokens, b.targets, {}, 1.0 / 64);
        m.backward(1.0 / 64);
        return std::tuple(s.sum, m.trainable_params().grads().to_vector<float>(), m.activation_bytes());
      };
      const auto [loss, grads, bytes] = run(false);
      const auto [offloaded_loss, offloaded_grads, offloaded_bytes] = run(true);
      EXPECT_EQ(offloaded_loss, loss);
      EXPECT_EQ(offloaded_grads, grads);
      EXPECT_EQ(bytes - offloaded_bytes, size_t(c.n_layers - 2) * 2 * 48 * size_t(c.dim) * sizeof(float));
    }
  }
  // Without checkpointing there is nothing to offload: the plan is the plain one.
  const ModelConfig c = model_preset("llama_tiny");
  Transformer m(c, DType::f32);
  m.set_activation_offloading(true);
  m.reserve(2, 48);
  EXPECT_EQ(m.activation_bytes(), activation_bytes(c, DType::f32, 2, 48));
  EXPECT_THROW(activation_bytes(c, DType::f32, 2, 48, {.offload_inputs = true}), Error);
}

class PackedSequences : public ::testing::TestWithParam<std::string> {};

// Samples packed into one row give each token the loss it has when its sample
// runs alone: no attention across samples, positions restart per sample.
TEST_P(PackedSequences, EqualRunningEachSampleAlone) {
  const ModelConfig config = small(GetParam());
  Transformer model(config, DType::f64);
  model.init_weights(21);
  const std::vector<int64_t> lengths = {5, 7, 3};  // + 1 token of padding = 16
  std::vector<int32_t> tokens, targets, positions;
  Generator g(22);
  std::vector<double> alone;
  for (int64_t n : lengths) {
    std::vector<int32_t> t, y;
    for (int64_t i = 0; i < n; ++i) {
      t.push_back(int32_t(g.next_below(uint64_t(config.vocab_size))));
      y.push_back(int32_t(g.next_below(uint64_t(config.vocab_size))));
    }
    model.forward(Tensor::from(t, {1, n}), Tensor::from(y, {1, n}));
    for (double l : model.token_losses().to_vector<double>()) alone.push_back(l);
    tokens.insert(tokens.end(), t.begin(), t.end());
    targets.insert(targets.end(), y.begin(), y.end());
    for (int64_t i = 0; i < n; ++i) positions.push_back(int32_t(i));
  }
  tokens.push_back(0);
  targets.push_back(ops::kIgnoreIndex);
  positions.push_back(0);
  const Batch packed{Tensor::from(tokens, {1, 16}), Tensor::from(targets, {1, 16}), Tensor::from(positions, {1, 16})};
  model.forward(packed.tokens, packed.targets, packed.positions);
  const auto losses = model.token_losses().to_vector<double>();
  for (size_t i = 0; i < alone.size(); ++i) EXPECT_NEAR(losses[i], alone[i], 1e-12) << GetParam() << " token " << i;

  // And the gradients of the packed row are right.
  auto loss = [&] { return model.forward(packed.tokens, packed.targets, packed.positions).mean(); };
  model.params().zero_grad();
  const ops::LossSum s = model.forward(packed.tokens, packed.targets, packed.positions);
  model.backward(1.0 / double(s.tokens));
  for (const char* name : {"layers.0.attn.qkv.weight", "layers.1.attn.out.weight", "tok_embeddings.weight"}) {
    Parameter& p = model.params().get(name);
    expect_gradient(p.value, p.grad, loss, GetParam() + " packed " + name, 1e-6, 24);
  }
  if (Parameter* pos = const_cast<Parameter*>(model.params().find("pos_embeddings.weight"))) {
    expect_gradient(pos->value, pos->grad, loss, "packed pos_embeddings", 1e-6, 24);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, PackedSequences, ::testing::Values("llama", "gpt2", "mpt"));

TEST(Transformer, RejectsBadInput) {
  Transformer model(model_preset("llama_tiny"), DType::f32);
  EXPECT_THROW(model.reserve(1, 100000), Error);  // beyond max_seq_len
  const Tensor bad_tokens = Tensor::from(std::vector<int32_t>{1, 999}, {1, 2});
  EXPECT_THROW(model.forward(bad_tokens), Error);
  EXPECT_THROW(model.backward(1.0), Error);  // no forward with targets yet
  ModelConfig c = model_preset("llama_tiny");
  c.n_kv_heads = 3;
  EXPECT_THROW(Transformer(c, DType::f32), Error);
}

TEST(Presets, ParameterCountsMatchThePublishedModels) {
  EXPECT_EQ(model_preset("gpt2_124M").num_params(), 124439808);
  EXPECT_EQ(model_preset("llama3_2_1B").num_params(), 1235814400);
  EXPECT_EQ(model_preset("llama3_1_8B").num_params(), 8030261248);
  EXPECT_EQ(model_preset("llama2_7B").num_params(), 6738415616);
  EXPECT_EQ(model_preset("mistral_7B").num_params(), 7241732096);
  EXPECT_EQ(model_preset("mpt_7B").num_params(), 6649286656);
  for (const std::string& name : model_preset_names()) EXPECT_NO_THROW(model_preset(name).validate()) << name;
  EXPECT_THROW(model_preset("llama4"), Error);
  // Sizes past any model's (a mistyped key) are errors, before memory is asked for them.
  ModelConfig huge = model_preset("llama_tiny");
  huge.n_layers = 10'000'000;
  EXPECT_EQ(error_of([&] { huge.validate(); }),
            "model 'llama_tiny': model.n_layers 10000000 is beyond 4096, more than any model has");
  huge = model_preset("llama_tiny");
  huge.dim = int64_t(1) << 62;
  EXPECT_NE(error_of([&] { huge.validate(); }).find("model.dim 4611686018427387904 is beyond 262144"),
            std::string::npos);
  // RoPE's settings that would give NaN positions (a factor of 0 divides by zero).
  const auto rope_error = [](auto change) {
    ModelConfig m = model_preset("llama3_1_8B");
    change(m);
    return error_of([&] { m.validate(); });
  };
  EXPECT_EQ(rope_error([](ModelConfig& m) { m.rope_scaling.factor = 0; }),
            "model 'llama3_1_8B': model.rope_scaling.factor must be at least 1 (1: no scaling), got 0");
  EXPECT_NE(rope_error([](ModelConfig& m) { m.rope_scaling.original_max_position = 0; })
                .find("model.rope_scaling.original_max_position must be positive, got 0"),
            std::string::npos);
  EXPECT_NE(rope_error([](ModelConfig& m) { m.rope_scaling.low_freq_factor = -1; })
                .find("model.rope_scaling.low_freq_factor must be positive, got -1"),
            std::string::npos);
  EXPECT_NE(rope_error([](ModelConfig& m) { m.rope_theta = 0; }).find("model.rope_theta must be positive, got 0"),
            std::string::npos);
  // A model without RoPE does not use them.
  ModelConfig gpt2 = model_preset("gpt2_tiny");
  gpt2.rope_scaling.factor = 0;
  EXPECT_NO_THROW(gpt2.validate());
}

TEST(Presets, TinyModelParametersMatchTheCount) {
  for (const char* name : {"llama_tiny", "gpt2_tiny", "mpt_tiny"}) {
    Transformer model(model_preset(name), DType::f32);
    EXPECT_EQ(model.params().numel(), model.config().num_params()) << name;
  }
}

}  // namespace
}  // namespace hone::test
