#include "hone/kernels/cuda/runtime.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "hone/core/allocator.hpp"
#include "hone/core/error.hpp"
#include "hone/core/profiler.hpp"
#include "hone/kernels/cuda/check.hpp"

namespace hone::kernels::cuda {

void fail_cuda(cudaError_t error, const char* call, const char* file, int line) {
  const std::string_view path(file);
  const size_t slash = path.find_last_of('/');
  const std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  // Clear the error (where it is not sticky), so that the next launch check does
  // not report it again as its own: callers may catch this one and go on (the
  // cuDNN attention plan that fails to run falls back to hone's kernels).
  cudaGetLastError();
  fail("{} failed at {}:{}: {}: {}", call, name, line, cudaGetErrorName(error), cudaGetErrorString(error));
}

void fail_text(const std::string& message) { throw Error(message); }

namespace {

// The process's device, initialized on first use so that programs that never
// touch CUDA (the CPU test suite on machines without a GPU) never call the driver.
struct Runtime {
  std::mutex mutex;
  int device = 0;
  std::atomic<bool> initialized = false;
  cudaStream_t stream = nullptr;
  size_t max_shared_memory = 0;
  int compute_capability = 0;

  void ensure_initialized() {
    if (initialized.load(std::memory_order_acquire)) return;  // every launch asks: no lock once set up
    std::lock_guard lock(mutex);
    if (initialized) return;
    HONE_CHECK(available(), "device cuda:{} requested, but no CUDA device is usable: {}", device,
               unavailable_reason());
    int count = 0;
    HONE_CUDA_CHECK(cudaGetDeviceCount(&count));
    HONE_CHECK(device < count, "device cuda:{} requested, but this machine has {} CUDA device(s)", device, count);
    HONE_CUDA_CHECK(cudaSetDevice(device));
    HONE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    int shared = 0;
    HONE_CUDA_CHECK(cudaDeviceGetAttribute(&shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    max_shared_memory = size_t(shared);
    int major = 0, minor = 0;
    HONE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    HONE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    compute_capability = 10 * major + minor;
    initialized = true;
  }
};

Runtime& runtime() {
  static Runtime* instance = new Runtime;  // never destroyed: tensors may be freed during exit
  return *instance;
}

// The runtime, initialized, with its device current on the calling thread: the
// current device is per host thread, and a thread other than the one that
// initialized (a data loader's, say) starts on device 0.
Runtime& ready_runtime() {
  Runtime& rt = runtime();
  rt.ensure_initialized();
  thread_local int thread_device = -1;
  if (thread_device != rt.device) {
    HONE_CUDA_CHECK(cudaSetDevice(rt.device));
    thread_device = rt.device;
  }
  return rt;
}

struct Availability {
  bool usable = false;
  std::string reason;
};

const Availability& availability() {
  static const Availability result = [] {
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess) {
      cudaGetLastError();
      return Availability{false, std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error)};
    }
    if (count == 0) return Availability{false, "the driver reports no CUDA device"};
    return Availability{true, ""};
  }();
  return result;
}

// Device memory in size classes: a freed block goes to the free list of its
// class and serves the next request of that class without cudaMalloc/cudaFree,
// which synchronize the device and cost far more than a training step's small
// tensors. Classes: multiples of 512 B up to 1 MiB; 8 classes per power of two
// up to 64 MiB (at most 12.5% slack); multiples of 2 MiB above (arenas, weights).
class CudaAllocator final : public Allocator {
 public:
  static size_t size_class(size_t bytes) {
    constexpr size_t kSmall = 512, kMiB = size_t(1) << 20, kLarge = 2 * kMiB;
    if (bytes <= kMiB) return round_up(bytes, kSmall);
    if (bytes <= 64 * kMiB) {
      const size_t step = std::bit_floor(bytes) / 8;
      return round_up(bytes, step);
    }
    return round_up(bytes, kLarge);
  }

  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    Runtime& rt = ready_runtime();
    const size_t size = size_class(bytes);
    std::lock_guard lock(mutex_);
    void* ptr = nullptr;
    std::vector<void*>& list = free_[size];
    if (!list.empty()) {
      ptr = list.back();
      list.pop_back();
      cached_ -= size;
    } else {
      cudaError_t error = cudaMalloc(&ptr, size);
      if (error == cudaErrorMemoryAllocation) {
        cudaGetLastError();  // not sticky: clear it and retry with the cache released
        release_cached_locked();
        error = cudaMalloc(&ptr, size);
      }
      if (error == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        size_t free = 0, total = 0;
        cudaMemGetInfo(&free, &total);
        fail("out of memory on cuda:{}: could not allocate {} bytes ({} in use by tensors, {} held by hone; the "
             "device has {} of {} bytes free)",
             rt.device, bytes, allocated_, reserved_, free, total);
      }
      if (error != cudaSuccess) fail_cuda(error, "cudaMalloc", __FILE__, __LINE__);
      reserved_ += size;
    }
    allocated_ += bytes;
    peak_ = std::max(peak_, allocated_);
    mark_owned(ptr, bytes);
    mark_unowned(static_cast<char*>(ptr) + bytes, size - bytes);  // where a GPU would read on without a fault
    return ptr;
  }

  void deallocate(void* ptr, size_t bytes) override {
    if (ptr == nullptr) return;
    const size_t size = size_class(bytes);
    mark_unowned(ptr, size);
    std::lock_guard lock(mutex_);
    free_[size].push_back(ptr);
    cached_ += size;
    allocated_ -= bytes;
  }

  MemoryStats stats() const override {
    std::lock_guard lock(mutex_);
    return {.allocated = allocated_, .peak_allocated = peak_, .reserved = reserved_};
  }

  void reset_peak() override {
    std::lock_guard lock(mutex_);
    peak_ = allocated_;
  }

  void zero(void* ptr, size_t bytes) override {
    if (bytes != 0) HONE_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream()));
  }

  void copy_from_host(void* dst, const void* src, size_t bytes) override { copy_to_device(dst, src, bytes); }

  void copy_to_host(void* dst, const void* src, size_t bytes) override { cuda::copy_to_host(dst, src, bytes); }

  void copy_within(void* dst, const void* src, size_t bytes) override {
    if (bytes != 0) HONE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()));
  }

#if HONE_CUDA_EMULATOR
  void mark_owned(void* ptr, size_t bytes) override { emulator::mark_owned(ptr, bytes); }
  void mark_unowned(void* ptr, size_t bytes) override { emulator::mark_unowned(ptr, bytes); }
#endif

  void release_cached() {
    if (!runtime().initialized) return;
    std::lock_guard lock(mutex_);
    release_cached_locked();
  }

 private:
  static size_t round_up(size_t bytes, size_t step) { return (bytes + step - 1) / step * step; }

  void release_cached_locked() {
    HONE_CUDA_CHECK(cudaStreamSynchronize(stream()));
    for (auto& [size, list] : free_) {
      while (!list.empty()) {  // off the list before freeing: a failed cudaFree leaves no freed block in it
        void* ptr = list.back();
        list.pop_back();
        reserved_ -= size;
        cached_ -= size;
        HONE_CUDA_CHECK(cudaFree(ptr));
      }
    }
  }

  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // by size class
  size_t allocated_ = 0, peak_ = 0, reserved_ = 0, cached_ = 0;
};

CudaAllocator& cuda_allocator() {
  static CudaAllocator* instance = new CudaAllocator;  // never destroyed, like the runtime
  return *instance;
}

// HONE_PROFILE's marks: timing events recorded on the compute stream, reused
// once read. Nothing throws (they run in the profiler's destructors): a failed
// kernel's error reaches the next op that checks.
struct ProfileMarks {
  std::mutex mutex;
  std::vector<cudaEvent_t> free;
};

ProfileMarks& profile_marks() {
  static ProfileMarks* instance = new ProfileMarks;  // never destroyed: marks are read at exit
  return *instance;
}

void release_profile_mark(void* mark) {
  ProfileMarks& marks = profile_marks();
  const std::lock_guard lock(marks.mutex);
  marks.free.push_back(static_cast<cudaEvent_t>(mark));
}

void* queue_profile_mark() {
  if (!runtime().initialized) return nullptr;  // no device work yet: the op is timed on the host
  cudaEvent_t event = nullptr;
  {
    ProfileMarks& marks = profile_marks();
    const std::lock_guard lock(marks.mutex);
    if (!marks.free.empty()) {
      event = marks.free.back();
      marks.free.pop_back();
    }
  }
  if (event == nullptr && cudaEventCreate(&event) != cudaSuccess) return nullptr;
  if (cudaEventRecord(event, runtime().stream) != cudaSuccess) {
    release_profile_mark(event);
    return nullptr;
  }
  return event;
}

bool profile_mark_passed(void* mark) {
  const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(mark));
  if (status == cudaErrorNotReady) (void)cudaGetLastError();  // not an error: not to be reported by the next check
  return status == cudaSuccess;
}

double seconds_between_profile_marks(void* first, void* last) {
  float ms = 0;
  if (cudaEventSynchronize(static_cast<cudaEvent_t>(last)) != cudaSuccess ||
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(first), static_cast<cudaEvent_t>(last)) != cudaSuccess) {
    return -1;
  }
  return double(ms) * 1e-3;
}

const DeviceClock g_profile_clock{.mark = queue_profile_mark,
                                  .passed = profile_mark_passed,
                                  .seconds_between = seconds_between_profile_marks,
                                  .release = release_profile_mark};

// Registered before main(): a CUDA tensor can be made before the first op runs.
const bool g_registered = [] {
  register_allocator(DeviceKind::cuda, &cuda_allocator());
  register_profile_clock(&g_profile_clock);
  return true;
}();

}  // namespace

bool available() { return availability().usable; }

const DeviceClock& profile_clock() { return g_profile_clock; }

std::string unavailable_reason() { return availability().reason; }

void set_device(int index) {
  Runtime& rt = runtime();
  std::lock_guard lock(rt.mutex);
  HONE_CHECK(!rt.initialized || rt.device == index,
             "cuda:{} requested after this process started computing on cuda:{} (one device per process)", index,
             rt.device);
  HONE_CHECK(index >= 0, "negative CUDA device index {}", index);
  rt.device = index;
}

int current_device() { return runtime().device; }

void check_device(Device device) {
  HONE_ASSERT(g_registered);
  const Runtime& rt = ready_runtime();
  HONE_CHECK(device.index == rt.device,
             "tensor on {} but this process computes on cuda:{} (one device per process; choose it with "
             "CUDA_VISIBLE_DEVICES or the launcher's local rank)",
             device.str(), rt.device);
}

void synchronize() {
  if (runtime().initialized) HONE_CUDA_CHECK(cudaStreamSynchronize(stream()));
}

void empty_cache() { cuda_allocator().release_cached(); }

cudaStream_t stream() { return ready_runtime().stream; }

size_t max_shared_memory_per_block() { return ready_runtime().max_shared_memory; }

int compute_capability() { return ready_runtime().compute_capability; }

DeviceBuffer::DeviceBuffer(size_t bytes) : data_(cuda_allocator().allocate(bytes)), bytes_(bytes) {}

DeviceBuffer::~DeviceBuffer() { cuda_allocator().deallocate(data_, bytes_); }

void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  HONE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream()));
  HONE_CUDA_CHECK(cudaStreamSynchronize(stream()));
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  HONE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream()));
  // The host buffer may be freed or reused as soon as this returns.
  HONE_CUDA_CHECK(cudaStreamSynchronize(stream()));
}

struct CopyStream::Handles {
  cudaStream_t copies = nullptr;
  cudaEvent_t compute_point = nullptr;  // where the compute stream was when a copy was queued
  std::vector<cudaEvent_t> done;        // by slot: its last copy's end
};

CopyStream::CopyStream(int slots) : handles_(std::make_unique<Handles>()) {
  ready_runtime();
  HONE_CHECK(slots > 0, "a copy stream needs at least one slot, got {}", slots);
  HONE_CUDA_CHECK(cudaStreamCreateWithFlags(&handles_->copies, cudaStreamNonBlocking));
  HONE_CUDA_CHECK(cudaEventCreateWithFlags(&handles_->compute_point, cudaEventDisableTiming));
  handles_->done.resize(size_t(slots));
  for (cudaEvent_t& event : handles_->done) HONE_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
}

// No throwing here: after a device fault every call fails, and the memory is
// the driver's to reclaim then.
CopyStream::~CopyStream() {
  if (handles_->copies != nullptr) cudaStreamSynchronize(handles_->copies);
  for (void* host : pinned_) cudaHostUnregister(host);
  for (cudaEvent_t event : handles_->done) {
    if (event != nullptr) cudaEventDestroy(event);
  }
  if (handles_->compute_point != nullptr) cudaEventDestroy(handles_->compute_point);
  if (handles_->copies != nullptr) cudaStreamDestroy(handles_->copies);
  cudaGetLastError();  // what failed here is not the next launch's error
}

void CopyStream::pin(void* host, size_t bytes) {
  if (bytes == 0) return;
  HONE_CUDA_CHECK(cudaHostRegister(host, bytes, cudaHostRegisterDefault));
  pinned_.push_back(host);
}

void CopyStream::copy(void* dst, const void* src, size_t bytes, int slot) {
  HONE_ASSERT(slot >= 0 && size_t(slot) < handles_->done.size());
  if (bytes == 0) return;
  HONE_CUDA_CHECK(cudaEventRecord(handles_->compute_point, stream()));
  HONE_CUDA_CHECK(cudaStreamWaitEvent(handles_->copies, handles_->compute_point, 0));
  // Default: the direction follows from the addresses (unified addressing).
  HONE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, handles_->copies));
  HONE_CUDA_CHECK(cudaEventRecord(handles_->done[size_t(slot)], handles_->copies));
}

// A slot with no copy yet has an event never recorded, which a wait passes.
void CopyStream::compute_waits_for(int slot) {
  HONE_ASSERT(slot >= 0 && size_t(slot) < handles_->done.size());
  HONE_CUDA_CHECK(cudaStreamWaitEvent(stream(), handles_->done[size_t(slot)], 0));
}

}  // namespace hone::kernels::cuda
