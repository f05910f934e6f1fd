// Gradient reduction while backward runs (DataParallel: in buckets at ZeRO
// stages 0 and 1, a unit at a time into a shard at stage 2), checked against a
// plain backward pass. A stand-in communicator plays a group of two ranks whose
// other rank computed the same gradients: every reduction doubles its slice
// (exact in fp32), and it records where each collective started and how far
// the backward pass had got by then.
#include <gtest/gtest.h>

#include <algorithm>

#include "hone/dist/data_parallel.hpp"
#include "hone/model/transformer.hpp"

namespace hone::dist {
namespace {

class MirrorCommunicator final : public Communicator {
 public:
  struct Started {
    int64_t begin, count;  // in the flat gradient buffer (-1: elsewhere)
    int root;              // -1: an all_reduce
    int64_t layers_done;   // calls of gradients_final before it started
  };

  MirrorCommunicator(int rank, const Tensor& grads, const int64_t& layers_done)
      : rank_(rank), grads_(grads), layers_done_(layers_done) {}
  std::vector<Started> started;

  int rank() const override { return rank_; }
  int size() const override { return 2; }
  std::string backend() const override { return "mirror"; }
  const std::vector<int>& world_ranks() const override { return ranks_; }
  void all_reduce(const Tensor& t) override {
    record(t, -1);
    ops::scale_(t, 2.0);
  }
  void reduce(const Tensor& input, const Tensor& output, int root) override {
    record(input, root);
    if (root == rank_) {
      output.copy_from(input);
      ops::scale_(output, 2.0);
    }
  }
  void reduce_scatter(const Tensor&, const Tensor&) override { unused(); }
  void all_gather(const Tensor&, const Tensor&) override { unused(); }
  void broadcast(const Tensor&, int) override { unused(); }
  void barrier() override { unused(); }
  void send(const Tensor&, int) override { unused(); }
  void recv(const Tensor&, int) override { unused(); }
  std::unique_ptr<Communicator> split(int, int) override { unused(); }

 private:
  void record(const Tensor& t, int root) {
    const int64_t begin = grads_.defined() ? int64_t(t.data<float>() - grads_.data<float>()) : -1;
    started.push_back({begin, t.numel(), root, layers_done_});
  }
  [[noreturn]] static void unused() { throw std::logic_error("not used by gradient reduction"); }
  int rank_;
  Tensor grads_;
  const int64_t& layers_done_;
  std::vector<int> ranks_{0, 1};
};

// llama_tiny with buffers padded for two shards; with LoRA, adapters of
// nonzero values (LoRA's B = 0 would make the gradients of A zero).
Transformer tiny_model(bool with_lora) {
  std::optional<LoraConfig> lora;
  if (with_lora) lora = LoraConfig{.rank = 4, .apply_to_mlp = true, .apply_to_output = true};
  Transformer model(model_preset("llama_tiny"), DType::f32, Device::cpu(), lora, {.pad_multiple = 2});
  model.init_weights(7);
  if (with_lora) {
    ParameterSet& trained = model.trainable_params();
    float* values = trained.values().data<float>();
    for (int64_t i = 0; i < trained.numel(); ++i) values[i] = 0.02f * float(int64_t(i * 2654435761u % 101) - 50) / 50;
  }
  return model;
}

// [2, 16] tokens and their next-token targets.
std::pair<Tensor, Tensor> tiny_batch() {
  std::vector<int32_t> tokens(2 * 16);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i * 37 % 256);
  const Tensor input = Tensor::from(tokens, Shape{2, 16});
  std::rotate(tokens.begin(), tokens.begin() + 1, tokens.end());
  return {input, Tensor::from(tokens, Shape{2, 16})};
}

// The trained gradients of one plain backward pass, padding included.
std::vector<float> plain_gradients(Transformer& model, const Tensor& input, const Tensor& targets) {
  model.trainable_params().zero_grad();
  model.forward(input, targets);
  model.backward(1.0);
  return model.trainable_params().grads().to_vector<float>();
}

struct Case {
  bool lora;
  int zero;
  int rank;
  int64_t bucket_bytes;
};

class BucketedReduction : public testing::TestWithParam<Case> {};

TEST_P(BucketedReduction, SumsEveryGradientOnceAndStartsBeforeBackwardEnds) {
  const Case c = GetParam();
  Transformer model = tiny_model(c.lora);
  ParameterSet& trained = model.trainable_params();
  const auto [input, targets] = tiny_batch();
  const std::vector<float> expected = plain_gradients(model, input, targets);

  int64_t layers_done = 0;
  MirrorCommunicator group(c.rank, trained.grads(), layers_done);
  DataParallel parallel(group, c.zero, Device::cpu(), c.bucket_bytes);
  trained.zero_grad();
  model.forward(input, targets);
  parallel.begin_reduction(trained);
  model.backward(1.0, [&](std::span<Parameter* const> final_params) {
    parallel.gradients_final(final_params);
    ++layers_done;
  });
  const Tensor reduced = parallel.finish_reduction();
  EXPECT_EQ(layers_done, 3);  // the head, then two layers

  // Every element summed (here: doubled) once.
  const std::vector<float> got = reduced.to_vector<float>();
  ASSERT_EQ(int64_t(got.size()), trained.grads().numel());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], 2 * expected[i]) << "element " << i;

  // The all_reduces tile the buffer. With buckets, the first starts while backward still runs.
  std::vector<MirrorCommunicator::Started> tiles = group.started;
  std::sort(tiles.begin(), tiles.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  int64_t end = 0;
  for (const auto& t : tiles) {
    EXPECT_EQ(t.begin, end);
    EXPECT_EQ(t.root, -1);
    end = t.begin + t.count;
  }
  EXPECT_EQ(end, trained.grads().numel());
  if (c.bucket_bytes == 0) {
    EXPECT_EQ(group.started.size(), 1u);
    EXPECT_EQ(group.started.front().layers_done, 3);
  } else {
    EXPECT_GT(parallel.buckets_started(), 2);
    EXPECT_LT(group.started.front().layers_done, 3) << "no bucket started before the backward pass ended";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, BucketedReduction,
                         testing::Values(Case{false, 0, 0, 16 << 10}, Case{false, 1, 1, 16 << 10},
                                         Case{false, 0, 0, 0}, Case{false, 1, 1, 0}, Case{true, 0, 0, 2 << 10},
                                         Case{true, 1, 1, 2 << 10}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return fmt::format("{}_zero{}_rank{}_{}", c.lora ? "lora" : "full", c.zero, c.rank,
                                              c.bucket_bytes ? fmt::format("buckets{}k", c.bucket_bytes >> 10)
                                                             : std::string("one_reduction"));
                         });

class ShardedGradientsTest : public testing::TestWithParam<std::pair<bool, int>> {};  // (LoRA, rank)

TEST_P(ShardedGradientsTest, KeepOnlyTheShardAndReduceEachUnitWhenBackwardReleasesIt) {
  const auto [with_lora, rank] = GetParam();
  Transformer model = tiny_model(with_lora);
  ParameterSet& trained = model.trainable_params();
  const auto [input, targets] = tiny_batch();
  const std::vector<float> expected = plain_gradients(model, input, targets);
  const int64_t padded = trained.grads().numel();

  int64_t layers_done = 0;
  MirrorCommunicator group(rank, Tensor(), layers_done);
  DataParallel parallel(group, 2, Device::cpu(), 16 << 10);
  model.set_residency(parallel.shard_gradients(trained));
  EXPECT_FALSE(trained.grads().defined());  // no whole gradient buffer any more
  EXPECT_FALSE(trained.frozen());
  const auto [offset, count] = parallel.shard(padded);
  for (int step = 0; step < 2; ++step) {  // the second step's sum starts from zero again
    group.started.clear();
    for (int micro = 0; micro < 2; ++micro) {  // each micro-batch's gradients are reduced as they are done
      model.forward(input, targets);
      if (micro == 1) parallel.begin_reduction(trained);
      model.backward(1.0);
    }
    const std::vector<float> got = parallel.finish_reduction().to_vector<float>();
    ASSERT_EQ(int64_t(got.size()), count);
    for (size_t i = 0; i < got.size(); ++i) {
      // Two micro-batches, each doubled by the stand-in rank: 4x, exactly.
      ASSERT_EQ(got[i], 4 * expected[size_t(offset) + i]) << "step " << step << ", element " << size_t(offset) + i;
    }
    // One reduce per unit and owner of its part: a unit inside one shard
    // makes one, the unit across the middle two.
    int64_t reduced = 0;
    for (const auto& s : group.started) {
      EXPECT_TRUE(s.root == 0 || s.root == 1);
      reduced += s.count;
    }
    EXPECT_EQ(reduced, 2 * trained.numel()) << "every element of both micro-batches reduced once";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, ShardedGradientsTest,
                         testing::Values(std::pair{false, 0}, std::pair{false, 1}, std::pair{true, 1}),
                         [](const auto& info) {
                           return fmt::format("{}_rank{}", info.param.first ? "lora" : "full", info.param.second);
                         });

}  // namespace
}  // namespace hone::dist
