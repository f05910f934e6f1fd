// PythonRandom against CPython 3.11's random module; each expectation is what
// the Python line in its comment printed.
#include <gtest/gtest.h>

#include "hone/core/error.hpp"
#include "hone/core/python_random.hpp"

namespace hone {
namespace {

using Indexes = std::vector<uint64_t>;

TEST(PythonRandom, DrawsTheBitsPythonDraws) {
  PythonRandom r(1234);
  // r = random.Random(1234); [r.getrandbits(32) for _ in range(3)], r.getrandbits(64), r.getrandbits(5), r.getrandbits(0)
  EXPECT_EQ(r.getrandbits(32), 4150886329u);
  EXPECT_EQ(r.getrandbits(32), 3342196574u);
  EXPECT_EQ(r.getrandbits(32), 1892932127u);
  EXPECT_EQ(r.getrandbits(64), 138193304849869414u);
  EXPECT_EQ(r.getrandbits(5), 2u);
  EXPECT_EQ(r.getrandbits(0), 0u);
}

TEST(PythonRandom, SeedsWiderThan32BitsAsPythonDoes) {
  PythonRandom r((uint64_t(1) << 40) + 7);
  // r = random.Random(2**40 + 7); r.getrandbits(32), r._randbelow(1), r._randbelow(1000)
  EXPECT_EQ(r.getrandbits(32), 2635837658u);
  EXPECT_EQ(r.randbelow(1), 0u);
  EXPECT_EQ(r.randbelow(1000), 256u);
}

TEST(PythonRandom, SamplesAsRandomSample) {
  PythonRandom r(1234);
  // r = random.Random(1234); [r.sample(range(7473), 5) for _ in range(3)]: the set algorithm
  EXPECT_EQ(r.sample(7473, 5), (Indexes{6374, 3610, 957, 61, 742}));
  EXPECT_EQ(r.sample(7473, 5), (Indexes{7462, 6610, 4769, 286, 5501}));
  EXPECT_EQ(r.sample(7473, 5), (Indexes{5677, 687, 806, 6279, 2905}));
  // then r.sample(range(10), 10), r.sample(range(40), 6), r.sample(range(100000), 8): pool, pool, set
  EXPECT_EQ(r.sample(10, 10), (Indexes{3, 0, 8, 6, 7, 2, 9, 4, 1, 5}));
  EXPECT_EQ(r.sample(40, 6), (Indexes{5, 11, 7, 0, 32, 31}));
  EXPECT_EQ(r.sample(100000, 8), (Indexes{32745, 8462, 87458, 70921, 61066, 8987, 78835, 88490}));
  EXPECT_THROW(r.sample(3, 4), Error);
}

}  // namespace
}  // namespace hone
