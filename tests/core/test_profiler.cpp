// HONE_PROFILE's timers: outermost ops only, timed on a registered device clock
// without waiting for it (marks read once the device has passed them), the
// products' floating-point operations counted to their op, and with
// HONE_PROFILE=products a table of the products by op and shape.
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "hone/core/profiler.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

// A device whose timeline the test moves: a mark is stamped with the device
// time at which it is queued and passed once `reached` marks have been.
struct FakeDevice {
  double now = 0;  // seconds
  size_t reached = 0;
  std::vector<double> stamps;
  int live_marks = 0;  // queued and not yet released
};
FakeDevice device;

size_t index_of(void* mark) { return reinterpret_cast<size_t>(mark) - 1; }

const DeviceClock fake_clock{
    .mark = []() -> void* {
      device.stamps.push_back(device.now);
      ++device.live_marks;
      return reinterpret_cast<void*>(device.stamps.size());  // index + 1: never null
    },
    .passed = [](void* mark) { return index_of(mark) < device.reached; },
    .seconds_between =
        [](void* first, void* last) {
          device.reached = std::max(device.reached, index_of(last) + 1);  // waits for it
          return device.stamps[index_of(last)] - device.stamps[index_of(first)];
        },
    .release = [](void*) { --device.live_marks; },
};

// The fields after `name` on its line of a profile's table ({} where no line starts with it).
std::vector<std::string> row(const std::string& report, const std::string& name) {
  const size_t at = report.find("\n" + name + "  ");
  if (at == std::string::npos) return {};
  std::istringstream line(report.substr(at + 1 + name.size(), report.find('\n', at + 1) - at - 1 - name.size()));
  std::vector<std::string> fields;
  for (std::string field; line >> field;) fields.push_back(field);
  return fields;
}

using Fields = std::vector<std::string>;

bool products_profiled() {
  setenv("HONE_PROFILE", "products", 1);  // read once per process, at the first op
  return profiling_enabled() && profiling_products();
}

TEST(Profiler, TimesOutermostOpsOnTheDeviceClockWithoutWaiting) {
  if (!products_profiled()) GTEST_SKIP() << "an earlier test in this process timed an op without HONE_PROFILE";
  register_profile_clock(&fake_clock);
  device = {};
  {
    const OpTimer outer("outer");
    const OpTimer inner("inner");  // nested: not recorded, no marks
    device.now += 0.0025;
  }
  EXPECT_EQ(device.stamps.size(), 2u);
  const std::string waiting = profile_report();
  EXPECT_EQ(row(waiting, "outer"), (Fields{"1", "0.0", "0.000", "0.0%"})) << waiting;
  EXPECT_NE(waiting.find("(1 call not timed"), std::string::npos) << waiting;
  reset_profile();
  EXPECT_EQ(device.live_marks, 0);

  device = {};
  for (int call = 0; call < 2; ++call) {
    const OpTimer op("outer");
    device.now += 0.0025;
  }
  device.reached = device.stamps.size();  // the device got through both calls
  const std::string report = profile_report();
  EXPECT_EQ(device.live_marks, 0);
  EXPECT_NE(report.find("hone profile (HONE_PROFILE): 0.005 s"), std::string::npos) << report;
  EXPECT_EQ(row(report, "outer"), (Fields{"2", "5.0", "2.500", "100.0%"})) << report;
  EXPECT_EQ(report.find("inner"), std::string::npos) << report;
  EXPECT_EQ(report.find("not timed"), std::string::npos) << report;
  register_profile_clock(nullptr);
  reset_profile();  // nothing to print at exit
}

// An op on the host, in a process whose device clock runs, is timed on the host.
TEST(Profiler, TimesHostOpsOnTheHostWhileADeviceClockRuns) {
  if (!products_profiled()) GTEST_SKIP() << "an earlier test in this process timed an op without HONE_PROFILE";
  register_profile_clock(&fake_clock);
  device = {};
  {
    const OpTimer op("host op");
    profile_op_on_host();  // what ops::detail::op_device does for CPU tensors
    device.now += 1.0;     // the device's time passes; the host's hardly
  }
  {
    const OpTimer op("device op");
    device.now += 1.0;
  }
  device.reached = device.stamps.size();
  const std::string report = profile_report();
  EXPECT_EQ(device.live_marks, 0);
  const Fields host = row(report, "host op"), on_device = row(report, "device op");
  ASSERT_EQ(host.size(), 4u) << report;
  EXPECT_LT(std::stod(host[1]), 100.0) << report;  // ms
  EXPECT_EQ(on_device, (Fields{"1", "1000.0", "1000.000", on_device.at(3)})) << report;
  register_profile_clock(nullptr);
  reset_profile();
}

TEST(Profiler, CountsProductsToTheirOpAndListsThemByShape) {
  if (!products_profiled()) GTEST_SKIP() << "an earlier test in this process timed an op without HONE_PROFILE";
  register_profile_clock(&fake_clock);
  device = {};
  {
    const OpTimer op("linear backward");
    for (bool trans_a : {false, true}) {
      const ProductTimer product(1, 1000, 1000, 500, trans_a, false, "", /*on_device=*/true);  // 1 GFLOP
      const ProductTimer inner(1, 8, 8, 8, false, false, "", true);  // inside a product: not counted
      device.now += 0.001;
    }
  }
  {
    const UnprofiledScope not_a_training_op;
    const OpTimer op("peak");
    const ProductTimer product(1, 4096, 4096, 4096, false, false, "", true);
  }
  flush_profile();  // waits for the device
  const std::string report = profile_report();
  EXPECT_EQ(device.live_marks, 0);
  // 2 GFLOP in 2 ms: 1 TFLOP/s, for the op and for each of its products.
  EXPECT_EQ(row(report, "linear backward"), (Fields{"1", "2.0", "2.000", "100.0%", "1.0"})) << report;
  EXPECT_NE(report.find("matrix products (HONE_PROFILE=products): 0.002 s"), std::string::npos) << report;
  for (const char* product : {"linear backward: 1000x1000x500 NN", "linear backward: 1000x1000x500 TN"}) {
    EXPECT_EQ(row(report, product), (Fields{"1", "1.0", "1.000", "50.0%", "1.0"})) << report;
  }
  EXPECT_EQ(report.find("8x8x8"), std::string::npos) << report;
  EXPECT_EQ(report.find("peak"), std::string::npos) << report;
  EXPECT_EQ(report.find("4096"), std::string::npos) << report;
  register_profile_clock(nullptr);
  reset_profile();
}

TEST(Profiler, TimesOpsOnTheHostWithoutADeviceClock) {
  if (!products_profiled()) GTEST_SKIP() << "an earlier test in this process timed an op without HONE_PROFILE";
  register_profile_clock(nullptr);
  {
    const OpTimer op("host op");
    const ProductTimer product(2, 16, 16, 16, false, true, "", /*on_device=*/false);
  }
  const std::string report = profile_report();
  // One call each, timed on the host, with a rate (calls, times, share, rate).
  for (const char* name : {"host op", "host op: 16x16x16 NT batch 2"}) {
    const Fields fields = row(report, name);
    ASSERT_EQ(fields.size(), 5u) << report;
    EXPECT_EQ(fields[0], "1") << report;
    EXPECT_EQ(fields[3], "100.0%") << report;
  }
  reset_profile();
}

}  // namespace
}  // namespace hone::test
