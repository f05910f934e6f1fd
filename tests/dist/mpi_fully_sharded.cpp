// ZeRO-3 (FullyShardedParameters) on 2 MPI ranks against the unsharded model in
// the same process, run by ctest as `mpirun -np 2 mpi_fully_sharded`. Both ranks
// feed the same batch, so the reduce-scattered gradients are exactly twice the
// unsharded model's (x + x is exact in floating point). A bf16 model gathers its
// projections' bf16 copies: each rank's cast of its chunk is the same as a
// slice of the whole's cast, so the passes stay exactly equal.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "hone/dist/fully_sharded.hpp"
#include "hone/model/transformer.hpp"

namespace hone::dist {
namespace {

// Passes acquisitions on and records the most units gathered at once.
class CountingResidency final : public UnitResidency {
 public:
  explicit CountingResidency(FullyShardedParameters& inner) : inner_(inner) {}
  void acquire(int unit, bool with_grads, int next) override {
    inner_.acquire(unit, with_grads, next);
    most = std::max(most, inner_.gathered_units());
  }
  void release(int unit) override { inner_.release(unit); }
  int most = 0;

 private:
  FullyShardedParameters& inner_;
};

// [2, 16] token ids spread over the vocabulary.
Tensor token_ids(int64_t vocab, int64_t seed) {
  std::vector<int32_t> ids(32);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((int64_t(i) * 37 + seed * 101) % vocab);
  return Tensor::from(ids, Shape{2, 16});
}

struct Case {
  const char* model;
  DType dtype;
  bool checkpointing;
  bool lora = false;  // the frozen base and the adapters sharded
};

class FullySharded : public testing::TestWithParam<Case> {};

TEST_P(FullySharded, PassesEqualTheUnshardedModelWithOneUnitGatheredAhead) {
  const Case c = GetParam();
  auto comm = Communicator::from_environment();
  ASSERT_EQ(comm->size(), 2);
  ModelConfig config = model_preset(c.model);
  config.n_layers = 4;  // 6 units: a pass that kept what it gathered would hold them all
  std::optional<LoraConfig> lora;
  if (c.lora) lora = LoraConfig{.rank = 4, .apply_to_mlp = true, .apply_to_output = !config.tie_embeddings};
  Transformer reference(config, c.dtype, Device::cpu(), lora), model(config, c.dtype, Device::cpu(), lora);
  for (Transformer* m : {&reference, &model}) {
    m->init_weights(3);
    m->set_activation_checkpointing(c.checkpointing);
    if (c.lora) {  // LoRA's B = 0 would make the gradients of A zero
      float* values = m->trainable_params().values().data<float>();
      for (int64_t i = 0; i < m->trainable_params().numel(); ++i) values[i] = 0.02f * float(i % 101 - 50) / 50;
      m->trainable_params().sync_compute();
    }
  }
  std::vector<ParameterSet*> sets{&model.params()};
  if (c.lora) sets.push_back(&model.trainable_params());
  FullyShardedParameters sharded(*comm, sets);
  CountingResidency counting(sharded);
  model.set_residency(&counting);
  // Each rank stores half of every group, rounded up. The trained set's
  // gradients are checked below: the adapters' with LoRA.
  const ParameterSet& base = model.params();
  EXPECT_LE(base.values().numel(), reference.params().numel() / 2 + int64_t(base.groups().size()));
  const ParameterSet& params = model.trainable_params();
  EXPECT_TRUE(params.sharded());
  EXPECT_FALSE(base.get("layers.0.attn.qkv.weight").value.defined());

  const Tensor tokens = token_ids(config.vocab_size, 1), targets = token_ids(config.vocab_size, 2);
  for (int step = 0; step < 2; ++step) {  // the second pass gathers again what the first freed
    reference.trainable_params().zero_grad();
    model.trainable_params().zero_grad();
    const ops::LossSum expected = reference.forward(tokens, targets);
    const ops::LossSum loss = model.forward(tokens, targets);
    EXPECT_EQ(loss.sum, expected.sum);
    // The head waits for backward, and so do tied embeddings (the head's projection).
    const bool tied = config.tie_embeddings;
    EXPECT_EQ(sharded.gathered_units(), tied ? 2 : 1);
    // The held head: a bf16 model gathered only the bf16 copy of its projection
    // (GEMMs read nothing else), and the norm's fp32 master weights, which it reads.
    const Parameter& head = base.get(tied ? "tok_embeddings.weight" : "lm_head.weight");
    EXPECT_EQ(head.value.defined(), c.dtype == DType::f32 || tied) << "the lookup reads tied embeddings' fp32 weights";
    EXPECT_TRUE(head.compute.defined());
    EXPECT_TRUE(base.get("norm.weight").value.defined());
    reference.backward(1.0 / double(expected.tokens));
    model.backward(1.0 / double(loss.tokens));
    EXPECT_EQ(sharded.gathered_units(), 0);
    sharded.finish_reductions();
    EXPECT_EQ(counting.most, tied ? 3 : 2);  // a unit and the next one, and tied embeddings throughout
    for (const ParameterSet::StoredRange& r : params.stored_ranges()) {
      const std::vector<float> got = params.grads().slice(r.stored, {r.count}).to_vector<float>();
      const std::vector<float> whole =
          reference.trainable_params().grads().slice(r.offset, {r.count}).to_vector<float>();
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], 2 * whole[i]) << "layout element " << r.offset + i;
    }
  }
  // A checkpoint's way: one unit of a set whole at a time, master weights
  // (also of a bf16 model's projections), kept by rank 0 alone; rank 1 takes
  // part in the gathers and keeps nothing. They are the unsharded model's.
  for (const ParameterSet* set : {&reference.params(), &reference.trainable_params()}) {
    const ParameterSet& sharded_set = set == &reference.params() ? base : params;
    for (int unit = 0; unit < sharded_set.units(); ++unit) {
      sharded.gather_master(sharded_set, unit, /*keep=*/comm->rank() == 0);
      EXPECT_EQ(sharded.gathered_units(), comm->rank() == 0 && sharded_set.gathered_numel(unit) > 0 ? 1 : 0);
      for (const Parameter& p : set->all()) {
        if (p.unit != unit || comm->rank() != 0) continue;
        const Parameter& q = sharded_set.get(p.name);
        EXPECT_EQ(q.value.to_vector<float>(), p.value.to_vector<float>()) << p.name;
        if (c.dtype == DType::bf16) {
          EXPECT_EQ(q.compute.to_vector<float>(), p.compute.to_vector<float>()) << p.name;
        }
      }
      sharded.release_all();
    }
  }
  EXPECT_FALSE(base.get("tok_embeddings.weight").value.defined());
}

INSTANTIATE_TEST_SUITE_P(Models, FullySharded,
                         testing::Values(Case{"llama_tiny", DType::f32, false}, Case{"llama_tiny", DType::bf16, true},
                                         Case{"gpt2_tiny", DType::f32, true}, Case{"gpt2_tiny", DType::bf16, false},
                                         Case{"llama_tiny", DType::f32, false, true},
                                         Case{"gpt2_tiny", DType::bf16, true, true}),
                         [](const testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.model) + "_" + std::string(dtype_name(info.param.dtype)) +
                                  (info.param.checkpointing ? "_checkpointing" : "") + (info.param.lora ? "_lora" : "");
                         });

}  // namespace
}  // namespace hone::dist
