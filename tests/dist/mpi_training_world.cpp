// The training world over `mpirun -np 2` as one tensor-parallel pair (tp 2,
// data-parallel groups of one rank): a stop request that reached one rank stops
// both. Summing it over the data-parallel group, as the trainer once did, left
// the other rank training while this one stopped to save: a hang.
#include <gtest/gtest.h>

#include "hone/config/config.hpp"
#include "hone/train/run_config.hpp"
#include "hone/train/training_world.hpp"

namespace hone {
namespace {

TEST(TrainingWorld, AnyIsTrueOnEveryRankOfTheWorldWhenOneRankSaysSo) {
  const Config config = training_schema().resolve(Config::from_yaml("distributed: {tp: 2}\n", "test"));
  TrainingWorld world(config, Device::cpu());
  ASSERT_EQ(world.size(), 2);
  ASSERT_EQ(world.tp_size(), 2);
  EXPECT_TRUE(world.any(world.rank() == 0));
  EXPECT_TRUE(world.any(world.rank() == 1));
  EXPECT_FALSE(world.any(false));
  EXPECT_EQ(world.sum(1.0), 1.0);  // sums stay over the data-parallel group: here each rank alone
}

}  // namespace
}  // namespace hone
