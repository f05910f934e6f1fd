#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"),
// the generator of cuRAND and of PyTorch's CUDA backend: 128 random bits for a
// 128-bit counter under a 64-bit key. One definition for host and device code,
// so CUDA kernels draw exactly the bits the CPU draws.
#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define HONE_HOST_DEVICE __host__ __device__
#else
#define HONE_HOST_DEVICE
#endif

namespace hone {

struct PhiloxBlock {
  uint32_t word[4];
  HONE_HOST_DEVICE constexpr uint32_t operator[](size_t i) const { return word[i]; }
  bool operator==(const PhiloxBlock&) const = default;
};

HONE_HOST_DEVICE constexpr PhiloxBlock philox4x32(uint64_t key, uint64_t counter_lo, uint64_t counter_hi) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = uint32_t(counter_lo), c1 = uint32_t(counter_lo >> 32);
  uint32_t c2 = uint32_t(counter_hi), c3 = uint32_t(counter_hi >> 32);
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kMul0) * c0, p1 = uint64_t(kMul1) * c2;  // mul.hi/lo on a GPU
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {{c0, c1, c2, c3}};
}

}  // namespace hone
