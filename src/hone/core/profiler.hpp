#pragma once
// Time per op, for finding hot paths where no sampling profiler works (VMs
// without performance counters; valgrind cannot run AVX-512 code). Set
// HONE_PROFILE=1 and the process prints, at exit, each op's calls, total time,
// share of the profiled time and, for ops that multiply matrices, their rate.
// HONE_PROFILE=products adds a table of the matrix products alone, by op and
// shape. Only the outermost op of a nested call is timed, so nothing is
// counted twice. Off, it costs one branch per op.
//
// On the CPU the times are wall time. A device whose ops only queue work (CUDA)
// registers a DeviceClock: each op on the device is timed between two marks
// queued with its work and read once the device has passed them, so profiling
// does not stop the queue and the times are the device's (an idle gap before an
// op's work, where the host fell behind, counts to that op). Ops tell which
// they are (profile_op_on_host).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace hone {

// Marks on a device's timeline. No function throws (they run in destructors).
struct DeviceClock {
  void* (*mark)();             // queues a mark after the work queued so far; null: none (no device yet)
  bool (*passed)(void* mark);  // whether the device has reached it, without waiting
  double (*seconds_between)(void* first, void* last);  // waits for `last`; negative where it cannot tell
  void (*release)(void* mark);                         // read or dropped: the mark may be reused
};

class OpTimer {
 public:
  explicit OpTimer(const char* op);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

  struct Stamp {
    std::chrono::steady_clock::time_point wall;
    void* mark = nullptr;  // on the device clock, where one is registered and running
  };

 private:
  friend class ProductTimer;
  friend void profile_op_on_host();
  const char* op_ = nullptr;  // null: not recording
  bool on_host_ = false;
  Stamp start_;
  std::atomic<double> flops_ = 0;  // of the products run inside, on any thread
};

// A matrix product (batch × m×n×k), where the GEMM backends start one: its
// floating-point operations count to the op that runs it, and with
// HONE_PROFILE=products it is timed on its own (on the device's clock where
// `on_device`). `epilogue` names what the product fuses ("" for none).
class ProductTimer {
 public:
  ProductTimer(int64_t batch, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, const char* epilogue,
               bool on_device);
  ~ProductTimer();
  ProductTimer(const ProductTimer&) = delete;
  ProductTimer& operator=(const ProductTimer&) = delete;

 private:
  std::string key_;  // empty: not recording
  double flops_ = 0;
  OpTimer::Stamp start_;
};

// Ops run while one lives are not recorded (hone bench's GEMM peak, measured
// after the timed steps).
class UnprofiledScope {
 public:
  UnprofiledScope();
  ~UnprofiledScope();
  UnprofiledScope(const UnprofiledScope&) = delete;
  UnprofiledScope& operator=(const UnprofiledScope&) = delete;
};

bool profiling_enabled();
// The op being recorded computes on the host: timed on the host's clock even
// where a device's clock is running (ops::detail::op_device calls it).
void profile_op_on_host();
bool profiling_products();  // HONE_PROFILE=products
// A backend whose ops only queue work registers its clock (null: none).
void register_profile_clock(const DeviceClock* clock);
// Forgets what was recorded so far: `hone bench` calls it after its untimed
// warm-up step, whose first touches of every buffer (page faults) would
// otherwise be charged to the ops that happen to write them first.
void reset_profile();
// Waits for the device to pass every mark queued so far and reads them (hone
// bench after its timed steps, so that nothing is left to read at exit).
void flush_profile();
// The tables printed at exit.
std::string profile_report();

}  // namespace hone
