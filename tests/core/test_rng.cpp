// Philox4x32-10 against the Random123 known-answer vectors, and the properties
// hone relies on: same numbers for any thread count, resumable state.
#include <cmath>

#include "hone/core/parallel.hpp"
#include "hone/core/rng.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

uint64_t pack(uint32_t lo, uint32_t hi) { return uint64_t(hi) << 32 | lo; }

TEST(Philox, KnownAnswerVectors) {
  // Random123 kat_vectors: "philox4x32 10 <counter x4> <key x2> <output x4>".
  EXPECT_EQ(philox4x32(0, 0, 0), (PhiloxBlock{{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}));
  EXPECT_EQ(philox4x32(pack(0xffffffff, 0xffffffff), pack(0xffffffff, 0xffffffff), pack(0xffffffff, 0xffffffff)),
            (PhiloxBlock{{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}));
  EXPECT_EQ(philox4x32(pack(0xa4093822, 0x299f31d0), pack(0x243f6a88, 0x85a308d3), pack(0x13198a2e, 0x03707344)),
            (PhiloxBlock{{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}));
}

TEST(Generator, SameNumbersForAnyThreadCount) {
  const int threads = num_threads();
  auto draw = [](int t) {
    set_num_threads(t);
    std::vector<float> v(100001);  // odd: the last Box-Muller pair is half used
    Generator(42, 3).normal(std::span<float>(v), 0.0, 1.0);
    return v;
  };
  auto one = draw(1), two = draw(2);
  set_num_threads(threads);
  EXPECT_EQ(one, two);
}

TEST(Generator, NormalAndUniformHaveTheRightMoments) {
  std::vector<double> v(200000);
  Generator g(7);
  g.normal(std::span<double>(v), 2.0, 3.0);
  double mean = 0, var = 0;
  for (double x : v) mean += x / double(v.size());
  for (double x : v) var += (x - mean) * (x - mean) / double(v.size());
  EXPECT_NEAR(mean, 2.0, 0.03);  // 4.5 standard errors
  EXPECT_NEAR(std::sqrt(var), 3.0, 0.03);
  g.uniform(std::span<double>(v), -1.0, 1.0);
  double lo = 1, hi = -1;
  for (double x : v) lo = std::min(lo, x), hi = std::max(hi, x);
  EXPECT_GE(lo, -1.0);
  EXPECT_LT(hi, 1.0);
  EXPECT_LT(lo, -0.999);
}

TEST(Generator, StateResumesTheSequence) {
  Generator a(11);
  a.next_u64();
  std::vector<float> first(10);
  a.normal(std::span<float>(first), 0, 1);
  const Generator::State saved = a.state();
  const uint64_t next = a.next_u64();
  Generator b(99);
  b.set_state(saved);
  EXPECT_EQ(b.next_u64(), next);
  // Streams under one seed differ.
  EXPECT_NE(Generator(1, 0).next_u64(), Generator(1, 1).next_u64());
}

TEST(Generator, NextBelowIsUniform) {
  Generator g(5);
  std::vector<int> counts(6, 0);
  for (int i = 0; i < 60000; ++i) ++counts[size_t(g.next_below(6))];
  for (int c : counts) EXPECT_NEAR(c, 10000, 400);
}

}  // namespace
}  // namespace hone::test
