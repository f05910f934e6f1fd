#include "hone/core/profiler.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "hone/core/text.hpp"

namespace hone {

namespace {

struct Totals {
  int64_t calls = 0;
  int64_t untimed = 0;  // calls whose device marks could not be read
  double seconds = 0;
  double flops = 0;
};

using Table = std::map<std::string, Totals>;
enum class Kind { op, product };

std::atomic<const DeviceClock*> g_clock = nullptr;

// An interval on the device's clock, read once the device has passed its end.
struct Pending {
  Totals* totals;
  const DeviceClock* clock;
  void* start;
  void* end;
};

class Profile {
 public:
  // Adds a call from `start` to `end`: on the device's clock where both ends are marks on it.
  void add(Kind kind, const std::string& key, const OpTimer::Stamp& start, const OpTimer::Stamp& end, double flops) {
    std::lock_guard lock(mutex_);
    Totals& t = (kind == Kind::op ? ops_ : products_)[key];
    ++t.calls;
    t.flops += flops;
    const DeviceClock* clock = g_clock.load();
    if (start.mark != nullptr && end.mark != nullptr && clock != nullptr) {
      pending_.push_back({&t, clock, start.mark, end.mark});
      // Reads what the device has done; waits only where it is far behind.
      read_pending_locked(/*wait=*/pending_.size() > kMostPending);
      return;
    }
    if (clock != nullptr) {
      for (void* mark : {start.mark, end.mark}) {
        if (mark != nullptr) clock->release(mark);
      }
    }
    t.seconds += std::chrono::duration<double>(end.wall - start.wall).count();
  }

  void reset() {
    std::lock_guard lock(mutex_);
    for (const Pending& p : pending_) release(p);
    pending_.clear();
    ops_.clear();
    products_.clear();
  }

  void flush() {
    std::lock_guard lock(mutex_);
    read_pending_locked(/*wait=*/true);
  }

  std::string report() {
    std::lock_guard lock(mutex_);
    read_pending_locked(/*wait=*/false);
    std::map<const Totals*, int64_t> unread;  // the device has not got there (or is gone, at exit)
    for (const Pending& p : pending_) ++unread[p.totals];
    std::string out;
    if (!ops_.empty()) out += format_table("hone profile (HONE_PROFILE)", "op", ops_, unread);
    if (!products_.empty()) {
      out += format_table("matrix products (HONE_PROFILE=products)", "op: product (m x n x k, A B as N or T, epilogue)",
                          products_, unread);
    }
    return out;
  }

  ~Profile() {
    const std::string text = report();
    if (!text.empty()) fmt::print(stderr, "{}", text);
  }

 private:
  static constexpr size_t kMostPending = 4096;

  static void release(const Pending& p) {
    p.clock->release(p.start);
    p.clock->release(p.end);
  }

  // Oldest first, as far as the device has got (wait: all of them).
  void read_pending_locked(bool wait) {
    while (!pending_.empty()) {
      const Pending& p = pending_.front();
      if (!wait && !p.clock->passed(p.end)) break;
      const double seconds = p.clock->seconds_between(p.start, p.end);
      if (seconds >= 0) p.totals->seconds += seconds;
      else ++p.totals->untimed;
      release(p);
      pending_.pop_front();
    }
  }

  static std::string format_table(std::string_view title, std::string_view name_header, const Table& table,
                                  const std::map<const Totals*, int64_t>& unread) {
    std::vector<std::pair<std::string, const Totals*>> rows;
    for (const auto& [name, t] : table) rows.emplace_back(name, &t);
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second->seconds > b.second->seconds; });
    double total = 0;
    size_t width = name_header.size();
    int64_t untimed = 0;
    for (const auto& [name, t] : rows) {
      total += t->seconds;
      width = std::max(width, name.size());
      const auto found = unread.find(t);
      untimed += t->untimed + (found != unread.end() ? found->second : 0);
    }
    std::string out = fmt::format("\n{}: {:.3f} s\n{:<{}} {:>9} {:>11} {:>10} {:>7} {:>9}\n", title, total,
                                  name_header, width, "calls", "total ms", "ms/call", "share", "TFLOP/s");
    for (const auto& [name, t] : rows) {
      const auto found = unread.find(t);
      const int64_t timed = t->calls - t->untimed - (found != unread.end() ? found->second : 0);
      out += fmt::format("{:<{}} {:>9} {:>11.1f} {:>10.3f} {:>6.1f}%", name, width, t->calls, t->seconds * 1e3,
                         timed > 0 ? t->seconds * 1e3 / double(timed) : 0.0,
                         total > 0 ? 100.0 * t->seconds / total : 0.0);
      // A rate where every call was timed.
      if (t->flops > 0 && t->seconds > 0 && timed == t->calls) {
        out += fmt::format(" {:>9.1f}", t->flops / t->seconds / 1e12);
      }
      out += '\n';
    }
    if (untimed > 0) {
      out += fmt::format("({} {} not timed: the device had not reached its marks, or they could not be read)\n",
                         untimed, plural(untimed, "call"));
    }
    return out;
  }

  std::mutex mutex_;
  Table ops_, products_;
  std::deque<Pending> pending_;
};

Profile& profile() {
  static Profile p;
  return p;
}

thread_local int t_depth = 0;          // nested ops and unprofiled scopes
thread_local OpTimer* t_op = nullptr;  // the outermost op this thread records
thread_local int t_product_depth = 0;  // nested products (a padded product runs packed ones)
// The op being recorded, seen from every thread: the products an op runs on
// worker threads (the CPU's attention tiles) count to it. One host thread runs
// ops at a time.
std::atomic<OpTimer*> g_op = nullptr;

OpTimer::Stamp now() {
  OpTimer::Stamp stamp{.wall = std::chrono::steady_clock::now()};
  if (const DeviceClock* clock = g_clock.load()) stamp.mark = clock->mark();
  return stamp;
}

OpTimer::Stamp now_on_host() { return {.wall = std::chrono::steady_clock::now()}; }

std::string product_key(const char* op, int64_t batch, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b,
                        const char* epilogue) {
  std::string key = fmt::format("{}: {}x{}x{} {}{}", op, m, n, k, trans_a ? 'T' : 'N', trans_b ? 'T' : 'N');
  if (batch != 1) key += fmt::format(" batch {}", batch);
  if (*epilogue != '\0') key += fmt::format(" {}", epilogue);
  return key;
}

}  // namespace

namespace {

// HONE_PROFILE, read once: unset, empty, 0, false, off or no is off;
// "products" adds the products' table; anything else is on.
enum class ProfileMode { off, ops, products };

ProfileMode profile_mode() {
  static const ProfileMode mode = [] {
    const char* v = std::getenv("HONE_PROFILE");
    std::string value = v ? v : "";
    std::ranges::transform(value, value.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (value.empty() || value == "0" || value == "false" || value == "off" || value == "no") return ProfileMode::off;
    return value == "products" ? ProfileMode::products : ProfileMode::ops;
  }();
  return mode;
}

}  // namespace

bool profiling_enabled() { return profile_mode() != ProfileMode::off; }

bool profiling_products() { return profile_mode() == ProfileMode::products; }

void register_profile_clock(const DeviceClock* clock) { g_clock = clock; }

void reset_profile() {
  if (profiling_enabled()) profile().reset();
}

void flush_profile() {
  if (profiling_enabled()) profile().flush();
}

std::string profile_report() { return profiling_enabled() ? profile().report() : std::string(); }

// Only outermost ops are recorded: inside this scope none is.
UnprofiledScope::UnprofiledScope() {
  if (profiling_enabled()) ++t_depth;
}

UnprofiledScope::~UnprofiledScope() {
  if (profiling_enabled()) --t_depth;
}

OpTimer::OpTimer(const char* op) {
  if (!profiling_enabled()) return;
  if (t_depth++ == 0) {
    profile();  // constructed before first use, destroyed (and printed) at exit
    op_ = op;
    t_op = this;
    g_op = this;
    start_ = now();
  }
}

OpTimer::~OpTimer() {
  if (!profiling_enabled()) return;
  --t_depth;
  if (!op_) return;
  t_op = nullptr;
  g_op = nullptr;
  profile().add(Kind::op, op_, start_, on_host_ ? now_on_host() : now(), flops_.load());
}

void profile_op_on_host() {
  if (profiling_enabled() && t_op != nullptr) t_op->on_host_ = true;
}

ProductTimer::ProductTimer(int64_t batch, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b,
                           const char* epilogue, bool on_device) {
  if (!profiling_enabled() || t_product_depth++ > 0) return;
  if (t_op == nullptr && t_depth > 0) return;  // in an unprofiled scope
  flops_ = 2.0 * double(batch) * double(m) * double(n) * double(k);
  OpTimer* const op = g_op.load();
  if (op != nullptr) op->flops_ += flops_;
  // Listed alone where they run on the op's thread (or outside any op): those
  // on its worker threads run side by side, their times are the op's.
  if (!profiling_products() || (op != nullptr && op != t_op)) return;
  key_ = product_key(op != nullptr ? op->op_ : "(no op)", batch, m, n, k, trans_a, trans_b, epilogue);
  profile();
  start_ = on_device ? now() : now_on_host();
}

ProductTimer::~ProductTimer() {
  if (!profiling_enabled()) return;
  --t_product_depth;
  if (key_.empty()) return;
  profile().add(Kind::product, key_, start_, start_.mark != nullptr ? now() : now_on_host(), flops_);
}

}  // namespace hone
