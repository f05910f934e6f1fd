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

}  // namespace
}  // namespace hone
