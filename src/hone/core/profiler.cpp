#include "hone/core/profiler.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace hone {

namespace {

struct Totals {
  int64_t calls = 0;
  double seconds = 0;
};

class Profile {
 public:
  void add(const char* op, double seconds) {
    std::lock_guard lock(mutex_);
    Totals& t = totals_[op];
    ++t.calls;
    t.seconds += seconds;
  }
  void reset() {
    std::lock_guard lock(mutex_);
    totals_.clear();
  }
  ~Profile() {
    if (totals_.empty()) return;
    std::vector<std::pair<std::string, Totals>> rows(totals_.begin(), totals_.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    double total = 0;
    for (const auto& [op, t] : rows) total += t.seconds;
    fmt::print(stderr, "\nhone profile (HONE_PROFILE): {:.3f} s in ops\n{:<24} {:>9} {:>11} {:>10} {:>7}\n", total, "op",
               "calls", "total ms", "ms/call", "share");
    for (const auto& [op, t] : rows) {
      fmt::print(stderr, "{:<24} {:>9} {:>11.1f} {:>10.3f} {:>6.1f}%\n", op, t.calls, t.seconds * 1e3,
                 t.seconds * 1e3 / double(t.calls), 100.0 * t.seconds / total);
    }
  }

 private:
  std::mutex mutex_;
  std::map<std::string, Totals> totals_;
};

Profile& profile() {
  static Profile p;
  return p;
}

thread_local int depth = 0;

std::atomic<void (*)()> barrier = nullptr;

void wait_for_device() {
  if (void (*wait)() = barrier.load()) wait();
}

}  // namespace

bool profiling_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("HONE_PROFILE");
    return v != nullptr && *v != '\0' && std::string(v) != "0";
  }();
  return enabled;
}

void register_profile_barrier(void (*wait)()) { barrier = wait; }

void reset_profile() {
  if (profiling_enabled()) profile().reset();
}

// Only outermost ops are recorded: inside this scope none is.
UnprofiledScope::UnprofiledScope() {
  if (profiling_enabled()) ++depth;
}

UnprofiledScope::~UnprofiledScope() {
  if (profiling_enabled()) --depth;
}

OpTimer::OpTimer(const char* op) {
  if (!profiling_enabled()) return;
  if (depth++ == 0) {
    profile();  // constructed before first use, destroyed (and printed) at exit
    op_ = op;
    wait_for_device();  // the work queued before this op is not its time
    start_ = std::chrono::steady_clock::now();
  }
}

OpTimer::~OpTimer() {
  if (!profiling_enabled()) return;
  --depth;
  if (!op_) return;
  wait_for_device();
  profile().add(op_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
}

}  // namespace hone
