#pragma once
// Internals of the CUDA backend, shared by its .cu and .cpp files: error checks
// that name the failing call and what the error means, the stream every kernel
// and copy runs on, the shared-memory limit and compute capability, and
// scratch memory.
#include <cstddef>
#include <string>

#include "hone/kernels/cuda/platform.hpp"

namespace hone::kernels::cuda {

// Throws hone::Error: "<call> failed at <file>:<line>: <error name>: <meaning>".
[[noreturn]] void fail_cuda(cudaError_t error, const char* call, const char* file, int line);
// Throws hone::Error with `message`. For .cu files, where nvcc cannot compile
// fmt's compile-time format checks (hone::fail).
[[noreturn]] void fail_text(const std::string& message);

// The stream of all of hone's device work. One stream orders everything, which
// is what makes the caching allocator's reuse of freed blocks safe.
cudaStream_t stream();
// Shared memory one block may use after opting in (cudaFuncSetAttribute).
size_t max_shared_memory_per_block();
// The device's compute capability as 10·major + minor (80: A100, 90: H100).
int compute_capability();

// Device scratch memory from the caching allocator (counted in its statistics),
// returned to it at scope exit; work queued on the stream before then may still
// use it, since a block is only handed out again to later work on that stream.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Stream-ordered copies that return once the copy is done.
void copy_to_host(void* dst, const void* src, size_t bytes);
void copy_to_device(void* dst, const void* src, size_t bytes);

}  // namespace hone::kernels::cuda

#define HONE_CUDA_CHECK(call)                                                         \
  do {                                                                                \
    const cudaError_t hone_error_ = (call);                                           \
    if (hone_error_ != cudaSuccess) ::hone::kernels::cuda::fail_cuda(hone_error_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: a bad configuration fails here, naming the kernel.
// Faults inside the kernel surface at the next synchronizing call; run with
// CUDA_LAUNCH_BLOCKING=1 to have them reported here instead.
#define HONE_CUDA_LAUNCHED(kernel_name)                                                             \
  do {                                                                                              \
    const cudaError_t hone_error_ = cudaGetLastError();                                             \
    if (hone_error_ != cudaSuccess)                                                                 \
      ::hone::kernels::cuda::fail_cuda(hone_error_, "launch of " kernel_name, __FILE__, __LINE__); \
  } while (0)
