// Half precision (f16) conversions, exhaustively: every f16 value survives
// f16 -> f32 -> f16, and every float between two neighbouring f16 values rounds
// to the nearer one, ties to even, through subnormals, the overflow bound and NaN.
#include <cmath>
#include <cstring>

#include "hone/kernels/cpu/elementwise.hpp"
#include "hone/ops/ops.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

using kernels::cpu::f16_to_float;
using kernels::cpu::float_to_f16;

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(CastF16, EveryValueRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_float(uint16_t(h));
    const bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    ASSERT_EQ(std::isnan(f), nan) << std::hex << h;
    if (nan) {
      // Quiet NaNs come back unchanged; signalling ones come back quieted, payload kept.
      ASSERT_EQ(float_to_f16(f), uint16_t(h | 0x200)) << std::hex << h;
    } else {
      ASSERT_EQ(float_to_f16(f), h) << std::hex << h;
    }
  }
  EXPECT_EQ(f16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0f, -24));  // the smallest subnormal
  EXPECT_EQ(f16_to_float(0x0400), std::ldexp(1.0f, -14));  // the smallest normal
  EXPECT_EQ(f16_to_float(0xfc00), -INFINITY);
  EXPECT_EQ(bits_of(f16_to_float(0x8000)), 0x80000000u);  // -0
}

TEST(CastF16, RoundsToNearestEven) {
  // Between each pair of neighbouring finite values (subnormals included): the
  // midpoint goes to the even one, anything off the midpoint to the nearer.
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    for (uint32_t sign : {0u, 0x8000u}) {
      const float lo = f16_to_float(uint16_t(h | sign)), hi = f16_to_float(uint16_t((h + 1) | sign));
      const float mid = float((double(lo) + double(hi)) / 2);  // exact: 12 significant bits
      ASSERT_EQ(float_to_f16(mid), ((h & 1) ? h + 1 : h) | sign) << std::hex << h;
      ASSERT_EQ(float_to_f16(std::nextafter(mid, lo)), h | sign) << std::hex << h;
      ASSERT_EQ(float_to_f16(std::nextafter(mid, hi)), (h + 1) | sign) << std::hex << h;
    }
  }
  // Overflow: 65520 is halfway from 65504 to the next step (65536), so it rounds to inf.
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(float_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(float_to_f16(-1e30f), 0xfc00);
  EXPECT_EQ(float_to_f16(INFINITY), 0x7c00);
  // Underflow: half the smallest subnormal is a tie that rounds to (even) zero.
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(float_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(float_to_f16(1e-30f), 0x0000);
  EXPECT_EQ(float_to_f16(-1e-30f), 0x8000);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(NAN))));
}

TEST(CastF16, TensorsAndHostMemory) {
  const Tensor f32 = random_tensor({3, 5}, DType::f32, 3, 100.0);
  Tensor half = Tensor::empty({3, 5}, DType::f16), back = Tensor::empty({3, 5}, DType::f32);
  ops::cast(f32, half);
  ops::cast(half, back);
  const auto a = f32.to_vector<float>(), b = back.to_vector<float>();
  const auto* bits = static_cast<const uint16_t*>(half.raw());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(bits[i], float_to_f16(a[i]));
    EXPECT_EQ(b[i], f16_to_float(bits[i]));
  }
  // From host memory (a mapped file) straight into a tensor.
  Tensor direct = Tensor::empty({3, 5}, DType::f32);
  ops::cast(half.raw(), DType::f16, direct);
  EXPECT_EQ(direct.to_vector<float>(), b);
  ops::cast(f32.raw(), DType::f32, direct);
  EXPECT_EQ(direct.to_vector<float>(), a);
  EXPECT_THROW(ops::cast(half, Tensor::empty({3, 5}, DType::bf16)), Error);
}

TEST(Cast, CastToConvertsOrReturnsTheSameTensor) {
  const Tensor f32 = Tensor::from(std::vector<float>{1.5f, -2.0f, 3.0f}, {3});
  const Tensor same = ops::cast_to(f32, DType::f32);
  EXPECT_EQ(same.raw(), f32.raw());  // no copy when nothing converts
  const Tensor bf = ops::cast_to(f32, DType::bf16);
  EXPECT_EQ(bf.dtype(), DType::bf16);
  EXPECT_EQ(bf.shape(), f32.shape());
  EXPECT_EQ(bf.to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 3.0f}));  // exact in bf16
}

}  // namespace
}  // namespace hone::test
