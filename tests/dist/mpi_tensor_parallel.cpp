// Tensor (and sequence) parallelism on 2 MPI ranks against the unsplit model in
// the same process, run by ctest as `mpirun -np 2 mpi_tensor_parallel`: each rank
// holds half of every attention's heads and every MLP's features, half of the
// rows of the residual stream and, where the vocabulary is even, half of it (the
// embedding rows, the output projection's rows, the logits' classes). The loss, the gradients completed by
// DataParallel (each split weight's parts put together with gather_whole) and
// the gradient norm must equal the unsplit model's up to the order of sums.
#include <gtest/gtest.h>

#include <cmath>

#include "hone/core/rng.hpp"
#include "hone/dist/data_parallel.hpp"
#include "hone/dist/tensor_parallel.hpp"
#include "hone/model/decoder.hpp"
#include "hone/model/transformer.hpp"
#include "hone/optim/adamw.hpp"

namespace hone::dist {
namespace {

// [2, 16] token ids spread over the vocabulary.
Tensor token_ids(int64_t vocab, int64_t seed) {
  std::vector<int32_t> ids(32);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((int64_t(i) * 37 + seed * 101) % vocab);
  return Tensor::from(ids, Shape{2, 16});
}

std::vector<double> as_doubles(const Tensor& t) {
  Tensor d = Tensor::empty(t.shape(), DType::f64);
  ops::cast(t.device().is_cpu() ? t : t.to(Device::cpu()), d);
  return d.to_vector<double>();
}

// One forward and backward pass of `reference` and of its tp-split twin `model`
// on the same batch: the loss, the gradient norm and every gradient of the
// trained set (split ones put together with gather_whole) agree to `tolerance`
// relative to each tensor's largest value.
void expect_same_step(Transformer& reference, Transformer& model, Communicator& tp, double tolerance,
                      const std::string& what) {
  LocalCommunicator one;  // no data parallelism: the reduction only completes what tp ranks hold whole
  DataParallel parallel(one, 0, Device::cpu(), 0, &tp);
  const int64_t vocab = reference.config().vocab_size;
  const Tensor tokens = token_ids(vocab, 1), targets = token_ids(vocab, 2);
  reference.trainable_params().zero_grad();
  const ops::LossSum expected = reference.forward(tokens, targets);
  reference.backward(1.0 / double(expected.tokens));
  model.trainable_params().zero_grad();
  const ops::LossSum loss = model.forward(tokens, targets);
  EXPECT_EQ(loss.tokens, expected.tokens) << what;
  EXPECT_NEAR(loss.sum, expected.sum, tolerance * std::abs(expected.sum)) << what;
  parallel.begin_reduction(model.trainable_params());
  model.backward(1.0 / double(loss.tokens));
  const Tensor reduced = parallel.finish_reduction();
  const double norm = grad_norm(reference.trainable_params());
  EXPECT_NEAR(parallel.grad_norm(reduced), norm, tolerance * norm) << what;
  for (const Parameter& p : reference.trainable_params().all()) {
    const Parameter& q = model.trainable_params().get(p.name);
    const std::vector<double> want = as_doubles(p.grad), got = as_doubles(gather_whole(q, q.grad, tp));
    ASSERT_EQ(got.size(), want.size()) << what << " " << p.name;
    double largest = 0, worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      largest = std::max(largest, std::abs(want[i]));
      worst = std::max(worst, std::abs(got[i] - want[i]));
    }
    EXPECT_GT(largest, 0.0) << what << " " << p.name << ": a zero gradient would prove nothing";
    EXPECT_LE(worst, tolerance * largest) << what << " " << p.name << ": gradients differ by up to "
                                          << worst / largest << " of the largest";
  }
}

struct Case {
  const char* model;  // llama: GQA, RoPE, SwiGLU; gpt2: LayerNorm and biases, learned positions, tied embeddings; mpt: ALiBi
  DType dtype;
  bool checkpointing;
  double tolerance;  // relative to each tensor's largest value
  int64_t vocab = 0;  // 0: the preset's (even: split over the 2 ranks); odd: held whole by each
};

class TensorParallel : public testing::TestWithParam<Case> {};

TEST_P(TensorParallel, LossAndGradientsEqualTheUnsplitModel) {
  const Case c = GetParam();
  auto comm = Communicator::from_environment();
  ASSERT_EQ(comm->size(), 2);
  ModelConfig config = model_preset(c.model);
  if (c.vocab) config.vocab_size = c.vocab;
  Transformer reference(config, c.dtype), model(config, c.dtype, Device::cpu(), std::nullopt,
                                                 {.tensor_parallel = comm.get()});
  for (Transformer* m : {&reference, &model}) {
    m->init_weights(5);
    m->set_activation_checkpointing(c.checkpointing);
  }
  ASSERT_EQ(model.tp_size(), 2);
  const Parameter& qkv = model.params().get("layers.0.attn.qkv.weight");
  EXPECT_EQ(qkv.shape[0] * 2, qkv.whole_shape[0]);
  EXPECT_EQ(model.params().get("layers.0.mlp.down.weight").shape[1] * 2, config.ffn_dim);
  EXPECT_EQ(model.params().get("norm.weight").shape, Shape{config.dim});
  const bool split_vocabulary = config.vocab_size % 2 == 0;
  EXPECT_EQ(model.splits_vocabulary(), split_vocabulary);
  EXPECT_EQ(model.params().get("tok_embeddings.weight").shape[0] * (split_vocabulary ? 2 : 1), config.vocab_size);

  for (const Parameter& p : reference.params().all()) {
    const Parameter& q = model.params().get(p.name);
    EXPECT_EQ(as_doubles(gather_whole(q, q.value, *comm)), as_doubles(p.value)) << p.name << ": drawn whole, then split";
  }
  expect_same_step(reference, model, *comm, c.tolerance, c.model);
  EXPECT_EQ(model.logits().size(1) * (split_vocabulary ? 2 : 1), config.vocab_size);
}

// LoRA on every projection a model has: q, k, v, gate and up adapters split B
// with their base's rows, output_proj and down_proj adapters split A with their
// base's columns, the output head's splits B by vocabulary rows. The adapters' gradients (the
// whole-held parts completed over the tp group) and the merged weights equal
// the unsplit model's.
TEST(TensorParallelLora, GradientsAndMergedWeightsEqualTheUnsplitModel) {
  auto comm = Communicator::from_environment();
  for (const char* name : {"llama_tiny", "gpt2_tiny"}) {
    ModelConfig config = model_preset(name);
    config.tie_embeddings = false;  // an adapter on the output head too
    const LoraConfig lora{.rank = 4, .attn_modules = lora_attn_module_names(), .apply_to_mlp = true,
                          .apply_to_output = true};
    Transformer reference(config, DType::f64, Device::cpu(), lora),
        model(config, DType::f64, Device::cpu(), lora, {.tensor_parallel = comm.get()});
    // B starts at zero, which would leave A's gradients zero: every adapter is drawn.
    for (Transformer* m : {&reference, &model}) m->init_weights(5);
    for (const Parameter& p : reference.trainable_params().all()) {
      Tensor whole = Tensor::empty(p.whole_shape, DType::f64);
      Generator(9, uint64_t(p.offset)).uniform(std::span(whole.data<double>(), size_t(whole.numel())), -0.3, 0.3);
      reference.trainable_params().write(p, whole);
      model.trainable_params().write(model.trainable_params().get(p.name), whole);
    }
    EXPECT_EQ(model.trainable_params().get("layers.0.lora.q_proj.b").shape[0] * 2, config.n_heads * config.head_dim());
    EXPECT_EQ(model.trainable_params().get("layers.0.lora.down_proj.a").shape[1] * 2, config.ffn_dim);
    EXPECT_EQ(model.trainable_params().get("lora.output.a").shape, (Shape{4, config.dim}));
    EXPECT_EQ(model.trainable_params().get("lora.output.b").shape, (Shape{config.vocab_size / 2, 4}));
    EXPECT_EQ(model.trainable_params().numel(), lora_parameter_count(config, lora, 2));  // the memory estimate's count

    expect_same_step(reference, model, *comm, 1e-12, name);

    // Merging each rank's parts, then putting the base weights together, gives
    // the unsplit model's merged weights.
    reference.merge_lora();
    model.merge_lora();
    for (const Parameter& p : reference.params().all()) {
      const Parameter& q = model.params().get(p.name);
      const std::vector<double> want = as_doubles(p.value), got = as_doubles(gather_whole(q, q.value, *comm));
      ASSERT_EQ(got.size(), want.size()) << p.name;
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-12 * (1 + std::abs(want[i]))) << name << " " << p.name << " at " << i;
      }
    }
  }
}

TEST(TensorParallelModel, RefusesWhatItCannotSplit) {
  auto comm = Communicator::from_environment();
  const ModelConfig config = model_preset("llama_tiny");
  const ModelPlacement split{.tensor_parallel = comm.get()};
  ModelConfig odd = config;
  odd.n_kv_heads = 1;
  odd.n_heads = 3;
  odd.dim = 48;
  EXPECT_THROW(Transformer(odd, DType::f32, Device::cpu(), std::nullopt, split), Error);
  Transformer model(config, DType::f32, Device::cpu(), std::nullopt, split);
  EXPECT_THROW(Decoder(model, 1, 16), Error);  // KV-cache decoding runs on one rank
  const Tensor tokens = token_ids(config.vocab_size, 1).slice(0, {1, 15});  // 15 rows do not split in two
  EXPECT_THROW(model.forward(tokens, tokens), Error);
}

// fp64: the sums differ only in their order (about 1e-16 relative); fp32 in
// rounding at every op (1e-5 relative of a tensor's largest gradient leaves a
// margin of about 10x over what was seen); bf16 also in where results are
// rounded to bf16 (a row-parallel projection's partial sums are rounded before
// the reduce-scatter adds them): up to 0.75% of a tensor's largest gradient
// was seen, 2 bf16 steps.
INSTANTIATE_TEST_SUITE_P(Models, TensorParallel,
                         testing::Values(Case{"llama_tiny", DType::f64, false, 1e-12},
                                         Case{"gpt2_tiny", DType::f64, false, 1e-12},
                                         Case{"mpt_tiny", DType::f64, true, 1e-12},
                                         Case{"llama_tiny", DType::f32, true, 1e-5},
                                         Case{"gpt2_tiny", DType::bf16, false, 2e-2},
                                         Case{"gpt2_tiny", DType::f64, false, 1e-12, 255},
                                         Case{"llama_tiny", DType::f32, false, 1e-5, 255}),
                         [](const testing::TestParamInfo<Case>& info) {
                           return fmt::format("{}_{}{}{}", info.param.model, dtype_name(info.param.dtype),
                                              info.param.checkpointing ? "_checkpointed" : "",
                                              info.param.vocab ? fmt::format("_vocab{}", info.param.vocab) : "");
                         });

}  // namespace
}  // namespace hone::dist
