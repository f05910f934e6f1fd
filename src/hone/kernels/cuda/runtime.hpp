#pragma once
// The CUDA device runtime as the rest of hone sees it, with no CUDA header:
// which device a process computes on, whether it is usable, waiting for queued
// work. Its caching allocator serves every Tensor on DeviceKind::cuda; it is
// registered with core's allocator_for() when this library is linked (ops/
// links it by calling check_device() in every op).
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "hone/core/device.hpp"

namespace hone {
struct DeviceClock;
}

namespace hone::kernels::cuda {

// Whether a CUDA device can be used, and why not when it cannot (no driver, no
// device, a driver older than the runtime).
bool available();
std::string unavailable_reason();

// hone computes on one CUDA device per process (data parallelism runs one
// process per device). set_device() picks it before the first allocation or
// kernel; the default is device 0.
void set_device(int index);
int current_device();
// Throws hone::Error unless `device` is this process's CUDA device and usable.
void check_device(Device device);

// Waits until the work queued so far has finished (for timing, and before the
// host reads results another way than through a copy).
void synchronize();
// HONE_PROFILE's clock (core/profiler.hpp): timing events on the compute
// stream, registered before main().
const DeviceClock& profile_clock();
// Gives the device memory that the allocator caches, but no tensor uses, back
// to the driver.
void empty_cache();

// Copies between device memory and host memory on a stream of their own, so
// that they run while the compute stream's kernels do (activation offloading).
// A copy starts after the compute queued before it and belongs to a slot; the
// compute stream waits for a slot's last copy only where compute_waits_for()
// says so. The caller keeps the memory a copy reads or writes alive and
// untouched until then: the allocator's reuse of freed blocks is ordered on the
// compute stream alone. Host memory given to pin() is page-locked, which makes
// copies from and to it asynchronous and several times faster.
class CopyStream {
 public:
  explicit CopyStream(int slots);
  ~CopyStream();  // waits for the copies queued, then unpins
  CopyStream(const CopyStream&) = delete;
  CopyStream& operator=(const CopyStream&) = delete;

  void pin(void* host, size_t bytes);
  void copy(void* dst, const void* src, size_t bytes, int slot);
  void compute_waits_for(int slot);

 private:
  struct Handles;  // the stream and events, opaque here
  std::unique_ptr<Handles> handles_;
  std::vector<void*> pinned_;
};
}  // namespace hone::kernels::cuda
