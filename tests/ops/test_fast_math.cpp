// The vectorizable exp of the softmax kernels against the C library's.
#include <cmath>
#include <limits>

#include "hone/kernels/cpu/fast_math.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

using kernels::cpu::fast_exp;

TEST(FastExp, IsWithinTwoUlpOfExpfAndHandlesTheEdges) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.000731f) {
    const double exact = std::exp(double(x));
    worst = std::max(worst, std::abs(double(fast_exp(x)) - exact) / exact);
  }
  EXPECT_LT(worst, 2.5e-7);  // float's epsilon is 1.2e-7
  EXPECT_EQ(fast_exp(0.0f), 1.0f);
  EXPECT_EQ(fast_exp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(fast_exp(-100.0f), 0.0f);
  EXPECT_TRUE(std::isnan(fast_exp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_GT(fast_exp(88.0f), 1e38f);
  EXPECT_EQ(fast_exp(1.0), std::exp(1.0));  // double keeps std::exp
}

}  // namespace
}  // namespace hone::test
