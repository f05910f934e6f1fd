// ParameterSet's flat layout and its ZeRO-3 shards.
#include <gtest/gtest.h>

#include <algorithm>

#include "hone/model/parameters.hpp"
#include "support/check.hpp"

namespace hone {
namespace {

// Two units of mixed weight-decay settings, declared out of layout order.
void declare(ParameterSet& set) {
  set.declare("b.norm", {5}, false, 1);
  set.declare("a.weight", {3, 4}, true, 0);
  set.declare("b.weight", {7}, true, 1);
  set.declare("a.bias", {3}, false, 0);
}

TEST(ParameterSet, LaysOutUnitByUnitDecayedFirst) {
  ParameterSet set;
  declare(set);
  set.allocate(DType::f32, DType::f32, Device::cpu());
  EXPECT_EQ(set.get("a.weight").offset, 0);
  EXPECT_EQ(set.get("a.bias").offset, 12);
  EXPECT_EQ(set.get("b.weight").offset, 15);
  EXPECT_EQ(set.get("b.norm").offset, 22);
  ASSERT_EQ(set.groups().size(), 4u);
  EXPECT_EQ(set.groups()[2].unit, 1);
  EXPECT_TRUE(set.groups()[2].decay);
  EXPECT_EQ(set.units(), 2);
}

TEST(ParameterSet, ShardsAllocatedDirectlyHoldWhatShardingAWholeSetKeeps) {
  // Three ranks: groups of 12, 3, 7 and 5 elements have chunks of 4, 1, 3 and 2
  // (the last rank's chunk of the 7 and 5 padded with zeros).
  ParameterSet whole;
  declare(whole);
  whole.allocate(DType::f32, DType::bf16, Device::cpu());
  std::vector<Tensor> values;
  for (const Parameter& p : whole.all()) values.push_back(test::random_tensor(p.shape, DType::f32, p.offset + 1));
  for (int rank = 0; rank < 3; ++rank) {
    ParameterSet sharded, cut;
    declare(sharded);
    declare(cut);
    sharded.allocate(DType::f32, DType::bf16, Device::cpu(), true, 1, ShardSpec{.rank = rank, .world = 3});
    cut.allocate(DType::f32, DType::bf16, Device::cpu());
    for (size_t i = 0; i < values.size(); ++i) {
      sharded.write(sharded.all()[i], values[i]);
      cut.write(cut.all()[i], values[i]);
    }
    cut.shard(rank, 3);
    EXPECT_EQ(sharded.values().numel(), 4 + 1 + 3 + 2);
    EXPECT_EQ(sharded.values().to_vector<float>(), cut.values().to_vector<float>()) << "rank " << rank;
    EXPECT_FALSE(sharded.compute().defined());
    EXPECT_FALSE(sharded.all()[0].value.defined());
    // The stored ranges cover this rank's part of the layout, padding excluded.
    int64_t covered = 0;
    for (const ParameterSet::StoredRange& r : sharded.stored_ranges()) {
      covered += r.count;
      for (int64_t k = 0; k < r.count; ++k) {
        const int64_t at = r.offset + k;
        const auto p = std::find_if(whole.all().begin(), whole.all().end(), [&](const Parameter& p) {
          return at >= p.offset && at < p.offset + p.shape.numel();
        });
        const float expected = values[size_t(p - whole.all().begin())].to_vector<float>()[size_t(at - p->offset)];
        ASSERT_EQ(sharded.values().to_vector<float>()[size_t(r.stored + k)], expected) << "layout element " << at;
      }
    }
    EXPECT_EQ(covered, rank < 2 ? 4 + 1 + 3 + 2 : 4 + 1 + 1 + 1);
  }
}

TEST(ParameterSet, AttachedUnitsReadTheirGatheredBuffers) {
  ParameterSet set;
  declare(set);
  set.allocate(DType::f32, DType::f32, Device::cpu(), true, 1, ShardSpec{.rank = 1, .world = 2});
  // Unit 1: b.weight's group (7 → 2 chunks of 4), then b.norm's (5 → 2 of 3).
  ASSERT_EQ(set.gathered_numel(1), 8 + 6);
  std::vector<float> gathered(14);
  for (size_t i = 0; i < gathered.size(); ++i) gathered[i] = float(i);
  const Tensor values = Tensor::from(gathered, Shape{14});
  set.attach(1, values, Tensor(), Tensor());
  EXPECT_EQ(set.get("b.weight").value.to_vector<float>(), std::vector<float>({0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(set.get("b.norm").value.to_vector<float>(), std::vector<float>({8, 9, 10, 11, 12}));
  EXPECT_FALSE(set.get("a.weight").value.defined());
  set.detach(1);
  EXPECT_FALSE(set.get("b.weight").value.defined());
}

// A fused [q | k | v] weight split by rows (segments 4, 2, 2), an output
// weight split by columns, a norm every part holds whole.
void declare_split(ParameterSet& set, int index, int parts) {
  set.declare("qkv", {8, 3}, true, 0, TensorSplit{.dim = 0, .parts = parts, .index = index, .segments = {4, 2, 2}});
  set.declare("out", {3, 4}, true, 0, TensorSplit{.dim = 1, .parts = parts, .index = index, .segments = {}});
  set.declare("norm", {3}, false, 0);
}

TEST(ParameterSet, SplitPartsHoldTheirSegmentsAndMapOntoTheWholeLayout) {
  ParameterSet whole;
  declare_split(whole, 0, 1);
  whole.allocate(DType::f32, DType::f32, Device::cpu());
  std::vector<Tensor> values;
  for (const Parameter& p : whole.all()) {
    values.push_back(test::random_tensor(p.shape, DType::f32, p.offset + 7));
    whole.write(p, values.back());
  }
  const std::vector<float> qkv = values[0].to_vector<float>(), out = values[1].to_vector<float>();
  for (const ShardSpec shard : {ShardSpec{}, ShardSpec{.rank = 1, .world = 2}}) {
    std::vector<int64_t> times_held(size_t(whole.numel()), 0);
    for (int index = 0; index < 2; ++index) {
      ParameterSet part;
      declare_split(part, index, 2);
      part.allocate(DType::f32, DType::f32, Device::cpu(), true, 1, shard);
      for (size_t i = 0; i < values.size(); ++i) part.write(part.all()[i], values[i]);
      EXPECT_TRUE(part.split());
      const Parameter& q = part.get("qkv");
      EXPECT_EQ(q.shape, Shape({4, 3}));
      EXPECT_EQ(q.whole_offset, 0);
      EXPECT_EQ(part.get("out").whole_offset, 24);
      EXPECT_EQ(part.get("norm").whole_offset, 36);
      if (shard.world == 1) {
        // Rows: query rows [2i, 2i + 2), key row 4 + i, value row 6 + i.
        const std::vector<float> got = q.value.to_vector<float>();
        for (int64_t r = 0; r < 4; ++r) {
          const int64_t row = r < 2 ? 2 * index + r : r == 2 ? 4 + index : 6 + index;
          for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(got[size_t(r * 3 + c)], qkv[size_t(row * 3 + c)]);
        }
        const std::vector<float> cols = part.get("out").value.to_vector<float>();  // columns [2i, 2i + 2)
        for (int64_t r = 0; r < 3; ++r)
          for (int64_t c = 0; c < 2; ++c) EXPECT_EQ(cols[size_t(r * 2 + c)], out[size_t(r * 4 + 2 * index + c)]);
      }
      // Every stored element is the whole model's element its range names.
      const std::vector<float> stored = part.values().to_vector<float>(), flat = whole.values().to_vector<float>();
      for (const ParameterSet::StoredRange& r : part.stored_ranges()) {
        for (int64_t k = 0; k < r.count; ++k) {
          ASSERT_EQ(stored[size_t(r.stored + k)], flat[size_t(r.offset + k)]) << "layout element " << r.offset + k;
          ++times_held[size_t(r.offset + k)];
        }
      }
    }
    // Unsharded, the two parts hold every split element once and the norm twice.
    if (shard.world == 1) {
      for (int64_t at = 0; at < whole.numel(); ++at) EXPECT_EQ(times_held[size_t(at)], at < 36 ? 1 : 2) << at;
    }
  }
}

TEST(ParameterSet, PartRunsOfEveryIndexTileTheWhole) {
  for (const TensorSplit& split : {TensorSplit{.dim = 0, .parts = 3, .index = 0, .segments = {6, 3}},
                                  TensorSplit{.dim = 1, .parts = 3, .index = 0, .segments = {}}}) {
    const Shape whole{9, 6};
    std::vector<int> covered(size_t(whole.numel()), 0);
    for (int index = 0; index < 3; ++index) {
      int64_t part_elements = 0;
      for (const PartRun& run : part_runs(whole, split, index)) {
        for (int64_t k = 0; k < run.count; ++k) ++covered[size_t(run.whole + k)];
        part_elements += run.count;
      }
      EXPECT_EQ(part_elements, part_shape(whole, split).numel());
    }
    EXPECT_EQ(std::count(covered.begin(), covered.end(), 1), whole.numel()) << "split dim " << split.dim;
  }
}

}  // namespace
}  // namespace hone
