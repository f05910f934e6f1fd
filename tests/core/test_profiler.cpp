// HONE_PROFILE's op timer: a registered device barrier runs before and after
// each outermost op, so that an asynchronous device's ops are timed whole.
#include <cstdlib>

#include "hone/core/profiler.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

int waits = 0;

TEST(Profiler, WaitsForTheDeviceAroundEachOutermostOp) {
  setenv("HONE_PROFILE", "1", 1);  // read once per process, at the first op
  if (!profiling_enabled()) GTEST_SKIP() << "an earlier test in this process timed an op without HONE_PROFILE";
  register_profile_barrier([] { ++waits; });
  {
    const OpTimer outer("outer");
    const OpTimer inner("inner");  // nested: neither timed nor waited for
  }
  EXPECT_EQ(waits, 2);
  {
    const OpTimer again("outer");
  }
  EXPECT_EQ(waits, 4);
  register_profile_barrier(nullptr);
  reset_profile();  // nothing to print at exit
}

}  // namespace
}  // namespace hone::test
