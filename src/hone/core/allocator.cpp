#include "hone/core/allocator.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include <sys/mman.h>
#include <unistd.h>

#include "hone/core/error.hpp"

#ifdef __SANITIZE_ADDRESS__  // HONE_SANITIZE builds
#include <sanitizer/asan_interface.h>
#endif

namespace hone {

size_t host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page_size = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? size_t(pages) * size_t(page_size) : 0;
}

namespace {
constexpr size_t kAlignment = 64;
// Buffers of 2 MiB and more (weights, gradients, AdamW's moments, the
// activation arena) start on a 2 MiB boundary and ask for transparent huge
// pages: most kernels leave THP to madvise, and with 4 KiB pages a 125M-model
// bench took 720k page faults (2.6 GB touched a page at a time: seconds of
// startup) and streaming kernels walked 4 KiB page tables. With them, 19k
// faults, and AdamW 8-35% and the step 4-16% faster (docs/benchmarks.md).
constexpr size_t kHugePageBytes = size_t(2) << 20;
Allocator* g_cuda_allocator = nullptr;

// Large fills and copies (a step's gradients: 500 MB for 125M parameters) run
// in pieces across the threads: one core's memset reaches only about half the
// memory bandwidth of two.
constexpr size_t kPieceBytes = size_t(1) << 20;
constexpr size_t kParallelBytes = 4 * kPieceBytes;

template <typename Fn>
void in_pieces(size_t bytes, Fn&& fn) {
  const int64_t pieces = int64_t((bytes + kPieceBytes - 1) / kPieceBytes);
#pragma omp parallel for schedule(static) if (bytes >= kParallelBytes)
  for (int64_t i = 0; i < pieces; ++i) {
    const size_t begin = size_t(i) * kPieceBytes;
    fn(begin, std::min(kPieceBytes, bytes - begin));
  }
}
}  // namespace

void* CpuAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t alignment = bytes >= kHugePageBytes ? kHugePageBytes : kAlignment;
  size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* ptr = std::aligned_alloc(alignment, rounded);
  if (ptr == nullptr) fail("out of host memory: could not allocate {} bytes", bytes);
  // Advice only: where THP is off the buffer is just as good, so the result is not checked.
  if (alignment == kHugePageBytes) ::madvise(ptr, rounded, MADV_HUGEPAGE);
  mark_unowned(static_cast<char*>(ptr) + bytes, rounded - bytes);  // rounding's, not the tensor's
  size_t now = allocated_.fetch_add(bytes) + bytes;
  size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  return ptr;
}

void CpuAllocator::mark_owned(void* ptr, size_t bytes) {
#ifdef __SANITIZE_ADDRESS__
  __asan_unpoison_memory_region(ptr, bytes);
#endif
}

void CpuAllocator::mark_unowned(void* ptr, size_t bytes) {
#ifdef __SANITIZE_ADDRESS__
  __asan_poison_memory_region(ptr, bytes);
#endif
}

void CpuAllocator::deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  std::free(ptr);
  allocated_.fetch_sub(bytes);
}

MemoryStats CpuAllocator::stats() const {
  size_t now = allocated_.load();
  return {now, peak_.load(), now};
}

void CpuAllocator::reset_peak() { peak_.store(allocated_.load()); }

void CpuAllocator::zero(void* ptr, size_t bytes) {
  in_pieces(bytes, [&](size_t begin, size_t count) { std::memset(static_cast<char*>(ptr) + begin, 0, count); });
}

void CpuAllocator::copy_from_host(void* dst, const void* src, size_t bytes) { copy(dst, src, bytes); }

void CpuAllocator::copy_to_host(void* dst, const void* src, size_t bytes) { copy(dst, src, bytes); }

void CpuAllocator::copy(void* dst, const void* src, size_t bytes) {
  in_pieces(bytes, [&](size_t begin, size_t count) {
    std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, count);
  });
}

void CpuAllocator::copy_within(void* dst, const void* src, size_t bytes) {
  if (bytes != 0) std::memmove(dst, src, bytes);
}

Allocator& allocator_for(Device device) {
  static CpuAllocator cpu;
  if (device.is_cpu()) return cpu;
  HONE_CHECK(g_cuda_allocator != nullptr,
             "device {} requested, but this hone was built without CUDA (rebuild where nvcc is found)",
             device.str());
  return *g_cuda_allocator;
}

void register_allocator(DeviceKind kind, Allocator* allocator) {
  HONE_ASSERT(kind == DeviceKind::cuda);
  g_cuda_allocator = allocator;
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Device parse_device(std::string_view name) {
  if (name == "cpu") return Device::cpu();
  if (name == "cuda") return Device::cuda(0);
  if (name.starts_with("cuda:")) {
    std::string index(name.substr(5));
    char* end = nullptr;
    long value = std::strtol(index.c_str(), &end, 10);
    if (!index.empty() && *end == '\0' && value >= 0) return Device::cuda(int(value));
  }
  fail("unknown device '{}': expected cpu, cuda or cuda:N", name);
}

}  // namespace hone
