#pragma once
// Device-side helpers of the CUDA kernels: storage conversions (bf16 stored as
// hone::bf16, computed in float), warp and block reductions, launch sizes.
// Only portable CUDA: warp shuffles and shared memory, no inline PTX, so a HIP
// build can compile these files (with kWarpSize and the shuffle masks adapted
// to 64-wide wavefronts).
#include <cuda_runtime.h>

#include <cstdint>

#include "hone/core/dtype.hpp"
#include "hone/kernels/cuda/check.hpp"

namespace hone::kernels::cuda {

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;

// Storage -> compute type. (Not named load/store: argument-dependent lookup on
// hone::bf16 would also find the host functions of hone/core/dtype.hpp.)
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __uint_as_float(uint32_t(x.bits) << 16); }

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
// Round to nearest even with the same bits as the CPU's float_to_bf16, NaN included.
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Sum over the block, returned to every thread. `scratch` holds one value per
// warp; blockDim.x is a multiple of the warp size. The order of additions is
// fixed, so the result is the same on every run.
template <typename V>
__device__ V block_sum(V v, V* scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : V(0);
  return warp_sum(v);
}

// A grid for n independent items of `threads` each (grid-stride loops cover the rest).
inline unsigned blocks_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return unsigned(blocks < 1 ? 1 : blocks > (int64_t(1) << 20) ? (int64_t(1) << 20) : blocks);
}

#define HONE_GRID_STRIDE(i, n)                                                           \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

}  // namespace hone::kernels::cuda
