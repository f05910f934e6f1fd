// The vectorizable exp and max of the softmax kernels against the C and C++
// libraries'.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
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

TEST(FastTanhErf, StayWithinTheirStatedErrors) {
  double tanh_err = 0, erf_err = 0;
  for (float x = -12.0f; x <= 12.0f; x += 0.00137f) {
    tanh_err = std::max(tanh_err, std::abs(double(kernels::cpu::fast_tanh(x)) - std::tanh(double(x))));
    erf_err = std::max(erf_err, std::abs(double(kernels::cpu::fast_erf(x)) - std::erf(double(x))));
  }
  EXPECT_LT(tanh_err, 3e-7);
  EXPECT_LT(erf_err, 5e-7);  // A&S 7.1.26: 1.5e-7, plus float rounding
}

TEST(FastMax, EqualsStdMaxBitForBitNaNAndSignedZerosIncluded) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float values[] = {-inf, -2.5f, -0.0f, 0.0f, 1e-45f, 3.0f, inf, nan};
  for (const float a : values) {
    for (const float b : values) {
      const float expected = std::max(a, b), got = kernels::cpu::fast_max(a, b);
      EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(expected)) << a << " " << b;
    }
  }
}

}  // namespace
}  // namespace hone::test
