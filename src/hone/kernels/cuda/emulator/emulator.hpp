#pragma once
// hone's CUDA emulator: the CUDA backend's kernels, unchanged, run on the CPU,
// so that machines without a GPU (CI's) run the GPU tests against the CPU
// kernels. A build with -DHONE_CUDA=EMULATOR compiles the .cu files as C++
// with HONE_CUDA_EMULATOR set, and platform.hpp includes this header in place
// of cuda_runtime.h: it declares the part of CUDA that hone uses.
//
// A launch runs on the calling thread, block after block (with the race check
// below, on two host threads). Each thread of a block is a
// fiber with a stack of its own that runs until it reaches a barrier
// (__syncthreads, __syncwarp, a warp shuffle) or returns; the block's threads
// take turns only there, so each runs as far as CUDA lets it run without the
// others. __shared__ variables are thread-local function statics (a host
// thread runs one block at a time); dynamic shared memory is a buffer per
// block, filled with 0xff bytes (NaN in float) so that reading what no thread
// wrote shows. Where a GPU would hang or read garbage, the launch fails with
// hone::Error naming the kernel's block: threads waiting at different
// barriers, a shuffle in a warp with lanes that have exited, a group of
// elements (common.cuh's load_elements) at an address a GPU cannot load it
// from. A launch out of CUDA's limits (block size, grid.y and grid.z above
// 65535, shared memory) sets cudaErrorInvalidConfiguration as CUDA does, and
// one with more than 48 KiB of dynamic shared memory, where the kernel's limit
// was not raised by cudaFuncSetAttribute, cudaErrorInvalidValue.
//
// Races: every write is seen at once here, on a GPU not necessarily. A build
// with -DHONE_EMULATOR_CHECK=RACES compiles the kernels with ThreadSanitizer,
// which then reports two threads of a block that touch the same memory (one of
// them writing) with no barrier that orders memory between them, and two
// blocks of a launch that do (emulator.cpp: a second host thread runs the
// blocks whose coordinates' sum is odd at every other launch of a kernel, a
// pseudo-random half at the others). With -DHONE_EMULATOR_CHECK=MEMORY,
// AddressSanitizer reports a kernel's access outside its tensors' bytes
// (mark_owned). Not modelled: timing, races between blocks that no launch put
// on different host threads. Device memory is host memory, and a launch is
// done when its call returns.
//
// Streams: copies and memsets wait in their stream's queue, in order, until
// something needs them done: a launch or a product on that stream, a
// synchronize, a wait for an event recorded after them (cudaStreamWaitEvent
// completes the event's stream up to the event at once: its work may have
// ended that early on a GPU). So a copy runs as late as CUDA lets it, and
// memory used with no wait for a copy shows: a copy that may already have
// started has its destination filled with 0xff bytes (NaN) until it runs, and
// keeps its source as it was; the first launch, product, copy or memset after
// which that source has changed (something wrote over it without waiting for
// the copy) fails, naming the copy and what ran.
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string_view>
#include <type_traits>

#include <math.h>  // expf, erff, ...: CUDA's math functions are global

// CUDA's keywords, as C++.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local
#define __align__(n) __attribute__((aligned(n)))

struct uint3 {
  unsigned x, y, z;
};

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

struct alignas(16) uint4 {
  unsigned x, y, z, w;
};

inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

// The running thread's coordinates, set by the emulator as it switches threads.
extern thread_local uint3 threadIdx, blockIdx;
extern thread_local dim3 blockDim, gridDim;

template <typename A, typename B>
constexpr std::common_type_t<A, B> min(A a, B b) {
  return b < a ? b : a;
}

template <typename A, typename B>
constexpr std::common_type_t<A, B> max(A a, B b) {
  return a < b ? b : a;
}

struct CUstream_st;  // the emulator's streams (emulator.cpp); cudaStream_t below

inline float __uint_as_float(uint32_t u) { return std::bit_cast<float>(u); }
inline uint32_t __float_as_uint(float f) { return std::bit_cast<uint32_t>(f); }

namespace hone::kernels::cuda::emulator {

// A kernel launch: HONE_LAUNCH (common.cuh) builds one and hands it the code
// of one thread, which is run once for every thread of the grid.
struct Launch {
  dim3 grid, block;
  size_t shared_bytes = 0;
  const void* kernel = nullptr;  // kernel_address: its shared memory limit, its launches so far
  const char* name = "";          // as HONE_LAUNCH was given it, for reports
  CUstream_st* stream = nullptr;  // what is queued on it runs first
};

void run(const Launch& launch, const std::function<void()>& thread);

// Work done by the host in the place of `stream`'s (a launch; the CPU's GEMM
// standing in for cuBLASLt): what is queued on the stream runs first, and a
// copy queued on another whose source the work wrote fails, naming the work
// as `what` and `name` ("kernel ", its name) (emulator.cpp).
void in_place_of_stream(CUstream_st* stream, std::string_view what, std::string_view name,
                        const std::function<void()>& work);

// A kernel's identity: its address (a template's with its arguments given).
template <typename Kernel>
const void* kernel_address(Kernel* kernel) {
  return reinterpret_cast<const void*>(kernel);
}

template <typename Thread>
void operator*(const Launch& launch, Thread thread) {
  run(launch, thread);
}

// What the device functions below need of the running block.
int lane();                      // the thread's lane in its warp
int block_barrier(int predicate);  // __syncthreads_or: whether any thread's predicate was nonzero
void warp_barrier();                 // __syncwarp
// Waits for the warp's other lanes, as a warp-wide call (a shuffle, the warp
// matrix API's) does on a GPU, without __syncwarp's memory ordering.
void warp_converge();
// Every lane of the warp gives `value`; each gets the value of lane `source`.
uint64_t warp_exchange(uint64_t value, int source);
void* dynamic_shared_memory();
// Which device bytes a tensor owns (runtime.cpp's caching allocator: a block's
// first bytes, up to its tensor's size; an arena's tensors). With
// -DHONE_EMULATOR_CHECK=MEMORY the bytes marked unowned (the rest of a block,
// a block back in the cache, an arena's bytes between its tensors) are out of
// bounds: a kernel touching them stops (queued copies and memsets that touch
// them run first, as they would on a GPU before the memory is reused). No-ops
// in other builds.
void mark_owned(void* bytes, size_t count);
void mark_unowned(void* bytes, size_t count);
// A GPU's vector loads and stores need their own size's alignment; x86 does not.
void check_aligned(const void* address, size_t bytes);

template <typename V>
V exchanged(V value, int source) {
  static_assert(sizeof(V) <= sizeof(uint64_t) && std::is_trivially_copyable_v<V>);
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof value);
  bits = warp_exchange(bits, source);
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

}  // namespace hone::kernels::cuda::emulator

inline void __syncthreads() { hone::kernels::cuda::emulator::block_barrier(0); }
inline int __syncthreads_or(int predicate) { return hone::kernels::cuda::emulator::block_barrier(predicate); }
inline void __syncwarp(unsigned = 0xffffffffu) { hone::kernels::cuda::emulator::warp_barrier(); }

// Only full-warp shuffles (width 32), which is all that hone's kernels use.
template <typename V>
V __shfl_xor_sync(unsigned, V value, int lane_mask) {
  return hone::kernels::cuda::emulator::exchanged(value, hone::kernels::cuda::emulator::lane() ^ lane_mask);
}

template <typename V>
V __shfl_sync(unsigned, V value, int source) {
  return hone::kernels::cuda::emulator::exchanged(value, source & 31);
}

// Threads take turns only at barriers, so any read-modify-write would be
// atomic; the compiler's atomics tell the race check (emulator.cpp) that these are.
template <typename T>
T atomicMin(T* address, T value) {
  T old = __atomic_load_n(address, __ATOMIC_RELAXED);
  while (value < old && !__atomic_compare_exchange_n(address, &old, value, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}

// The runtime API: errors, the device, memory, copies, streams and events.
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
};
const char* cudaGetErrorName(cudaError_t error);
const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetLastError();

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
enum cudaDeviceAttr {
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device);

cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMemGetInfo(size_t* free, size_t* total);
constexpr unsigned cudaHostRegisterDefault = 0;
cudaError_t cudaHostRegister(void* ptr, size_t bytes, unsigned flags);
cudaError_t cudaHostUnregister(void* ptr);

using cudaStream_t = struct CUstream_st*;
using cudaEvent_t = struct CUevent_st*;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = {});
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream = {});

constexpr unsigned cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDisableTiming = 2;
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = {});
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
// Kernels run as they are launched here, so an event's time is the host's when
// it was recorded (copies queued before it run later: not counted).
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

// Kernel attributes: no static shared memory is known here (it is counted at
// run time, as function statics). A kernel's dynamic shared memory is limited
// to CUDA's default 48 KiB until cudaFuncSetAttribute raises it, as on a GPU.
struct cudaFuncAttributes {
  size_t sharedSizeBytes = 0;
  size_t localSizeBytes = 0;
  int maxThreadsPerBlock = 1024;
  int numRegs = 0;
  int maxDynamicSharedSizeBytes = 0;
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

namespace hone::kernels::cuda::emulator {
inline constexpr int kMaxSharedMemoryPerBlock = 227 * 1024;  // an H100's, after opting in
// A kernel's dynamic shared memory limit (by its kernel_address): 48 KiB until set.
int max_dynamic_shared(const void* kernel);
void set_max_dynamic_shared(const void* kernel, int bytes);
}  // namespace hone::kernels::cuda::emulator

template <typename Kernel>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, Kernel* kernel) {
  *attributes = {};
  namespace emulator = hone::kernels::cuda::emulator;
  attributes->maxDynamicSharedSizeBytes = emulator::max_dynamic_shared(emulator::kernel_address(kernel));
  return cudaSuccess;
}

template <typename Kernel>
cudaError_t cudaFuncSetAttribute(Kernel* kernel, cudaFuncAttribute, int value) {
  namespace emulator = hone::kernels::cuda::emulator;
  if (value < 0 || value > emulator::kMaxSharedMemoryPerBlock) return cudaErrorInvalidValue;
  emulator::set_max_dynamic_shared(emulator::kernel_address(kernel), value);
  return cudaSuccess;
}
