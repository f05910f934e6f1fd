#pragma once
// Device memory with accounting: every tensor's bytes come from an Allocator,
// whose counters feed the memory/* metrics and hone bench's peak_memory_bytes.
#include <atomic>
#include <cstddef>

#include "hone/core/device.hpp"

namespace hone {

struct MemoryStats {
  size_t allocated = 0;       // bytes in live tensors
  size_t peak_allocated = 0;  // high-water mark of `allocated` since the last reset
  size_t reserved = 0;        // bytes held from the system (>= allocated with a caching allocator)
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual MemoryStats stats() const = 0;
  virtual void reset_peak() = 0;
  virtual void zero(void* ptr, size_t bytes) = 0;
  // Copies between this device's memory and host memory, or within this device
  // (ranges that do not overlap).
  virtual void copy_from_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_within(void* dst, const void* src, size_t bytes) = 0;
  // Which bytes of an allocation a tensor owns, where an allocation holds
  // several (Arena): the CUDA emulator's memory check (docs/cuda.md) and, on
  // the CPU, HONE_SANITIZE builds report an access to bytes marked unowned.
  // No-ops elsewhere.
  virtual void mark_owned(void* /*ptr*/, size_t /*bytes*/) {}
  virtual void mark_unowned(void* /*ptr*/, size_t /*bytes*/) {}
};

// This machine's physical memory in bytes (0 where the system does not say).
size_t host_memory_bytes();

// Host memory, 64-byte aligned (one cache line, one AVX-512 vector).
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  MemoryStats stats() const override;
  void reset_peak() override;
  void zero(void* ptr, size_t bytes) override;
  void copy_from_host(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void copy_within(void* dst, const void* src, size_t bytes) override;
  // In HONE_SANITIZE builds AddressSanitizer reports accesses to unowned bytes.
  void mark_owned(void* ptr, size_t bytes) override;
  void mark_unowned(void* ptr, size_t bytes) override;

 private:
  static void copy(void* dst, const void* src, size_t bytes);  // not overlapping

  std::atomic<size_t> allocated_{0};
  std::atomic<size_t> peak_{0};
};

// The allocator that owns memory on `device`. CUDA registers its own when built.
Allocator& allocator_for(Device device);
void register_allocator(DeviceKind kind, Allocator* allocator);

}  // namespace hone
