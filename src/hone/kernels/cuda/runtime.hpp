#pragma once
// The CUDA device runtime as the rest of hone sees it, with no CUDA header:
// which device a process computes on, whether it is usable, waiting for queued
// work. Its caching allocator serves every Tensor on DeviceKind::cuda; it is
// registered with core's allocator_for() when this library is linked (ops/
// links it by calling check_device() in every op).
#include <string>

#include "hone/core/device.hpp"

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
// Gives the device memory that the allocator caches, but no tensor uses, back
// to the driver.
void empty_cache();

}  // namespace hone::kernels::cuda
