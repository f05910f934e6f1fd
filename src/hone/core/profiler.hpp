#pragma once
// Wall time per op, for finding hot paths where no sampling profiler works (VMs
// without performance counters; valgrind cannot run AVX-512 code). Set
// HONE_PROFILE=1 and the process prints, at exit, each op's calls, total time
// and share of the profiled time. Only the outermost op of a nested call is
// timed, so nothing is counted twice. Off, it costs one branch per op. On a
// device whose ops run asynchronously (CUDA), each timed op waits for the
// device before and after (register_profile_barrier): the times are the
// device's, and a profiled run is slower than one without.
#include <chrono>

namespace hone {

class OpTimer {
 public:
  explicit OpTimer(const char* op);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  const char* op_ = nullptr;  // null: not recording
  std::chrono::steady_clock::time_point start_;
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
// A backend whose ops only queue work registers how to wait for it.
void register_profile_barrier(void (*wait_for_device)());
// Forgets what was recorded so far: `hone bench` calls it after its untimed
// warm-up step, whose first touches of every buffer (page faults) would
// otherwise be charged to the ops that happen to write them first.
void reset_profile();

}  // namespace hone
