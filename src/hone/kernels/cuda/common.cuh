#pragma once
// Device-side helpers of the CUDA kernels: storage conversions (bf16 stored as
// hone::bf16, computed in float), warp and block reductions, launch sizes.
// Only portable CUDA: warp shuffles and shared memory, no inline PTX, so the
// same files compile as HIP for AMD GPUs (platform.hpp; CI checks it).
#include <cstdint>
#include <initializer_list>

#include "hone/core/dtype.hpp"
#include "hone/kernels/cuda/check.hpp"
#include "hone/kernels/cuda/platform.hpp"

namespace hone::kernels::cuda {

// The lanes that shuffle together: an NVIDIA warp. An AMD wavefront of 64
// lanes holds two such warps, which shuffle apart (the shuffles' width below).
constexpr int kWarpSize = 32;
#if defined(__AMDGCN_WAVEFRONT_SIZE)
static_assert(__AMDGCN_WAVEFRONT_SIZE % kWarpSize == 0, "a wavefront holds whole warps");
#endif

// The warp's operations: v of lane (this lane ^ offset) and of lane `lane`,
// within the warp; and warp_sync, which orders the warp's shared-memory writes
// before its reads that follow (lanes reading what other lanes wrote).
#if HONE_HIP
template <typename V>
__device__ __forceinline__ V shuffle_xor(V v, int offset) { return __shfl_xor(v, offset, kWarpSize); }
template <typename V>
__device__ __forceinline__ V shuffle(V v, int lane) { return __shfl(v, lane, kWarpSize); }
__device__ __forceinline__ void warp_sync() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}
#else
template <typename V>
__device__ __forceinline__ V shuffle_xor(V v, int offset) { return __shfl_xor_sync(0xffffffffu, v, offset); }
template <typename V>
__device__ __forceinline__ V shuffle(V v, int lane) { return __shfl_sync(0xffffffffu, v, lane); }
__device__ __forceinline__ void warp_sync() { __syncwarp(); }
#endif

// Launches a kernel on hone's stream: HONE_LAUNCH(grid, threads, shared_bytes,
// kernel)(arguments...). The kernel comes last, with all its template arguments
// (the CUDA emulator, emulator/emulator.hpp, which runs it on the CPU, takes its
// address: a kernel's dynamic shared memory limit is its own).
// dynamic_shared<T>() is the block's dynamic shared memory (the launch's
// shared_bytes), 128-byte aligned for the warp matrix API.
#if HONE_CUDA_EMULATOR
#define HONE_LAUNCH(grid, threads, shared_bytes, ...)                                                      \
  ::hone::kernels::cuda::emulator::Launch{dim3(grid), dim3(threads), size_t(shared_bytes),                 \
                                          ::hone::kernels::cuda::emulator::kernel_address(__VA_ARGS__),    \
                                          #__VA_ARGS__, ::hone::kernels::cuda::stream()} *                 \
      [=](auto... hone_arguments) { return [=] { __VA_ARGS__(hone_arguments...); }; }
template <typename T>
T* dynamic_shared() {
  return static_cast<T*>(emulator::dynamic_shared_memory());
}
#else
#define HONE_LAUNCH(grid, threads, shared_bytes, ...) \
  __VA_ARGS__<<<(grid), (threads), (shared_bytes), ::hone::kernels::cuda::stream()>>>
template <typename T>
__device__ __forceinline__ T* dynamic_shared() {
  extern __shared__ __align__(128) unsigned char hone_dynamic_shared[];
  return reinterpret_cast<T*>(hone_dynamic_shared);
}
#endif

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

template <typename V>
__device__ __forceinline__ V warp_sum(V v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += shuffle_xor(v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = fmaxf(v, shuffle_xor(v, offset));
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

// Kernels over the rows of a matrix: a block takes blockDim.y rows at a time
// and its threads blockDim.x columns of each, so no thread divides a flat
// index to find its row and column. (A 64-bit integer division is a software
// routine of tens of instructions on a GPU: one per 2-byte element costs more
// than the element's memory traffic.) Columns take whole warps, rows the rest
// of the block's threads; the grid's y and z are the kernel's own.
struct RowsLaunch {
  unsigned blocks;
  dim3 threads;
};
inline RowsLaunch rows_launch(int64_t rows, int64_t cols, int threads) {
  int columns = kWarpSize;
  while (columns < cols && columns * 2 <= threads) columns *= 2;
  const int rows_per_block = threads / columns;
  return {blocks_for(rows, rows_per_block), dim3(unsigned(columns), unsigned(rows_per_block))};
}

#define HONE_ROW_STRIDE(row, rows)                                                              \
  for (int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; row < (rows); \
       row += int64_t(gridDim.x) * blockDim.y)
#define HONE_COLUMN_STRIDE(col, cols) for (int64_t col = threadIdx.x; col < (cols); col += blockDim.x)

// Kernels over [batch, seq] rows take the samples along the grid's z (at most
// 65535 blocks there; the loop covers more), so a row's position in its
// sample needs no division either.
inline unsigned samples_grid(int64_t batch) { return unsigned(batch < 1 ? 1 : batch > 65535 ? 65535 : batch); }
#define HONE_SAMPLE_STRIDE(sample, batch) \
  for (int64_t sample = blockIdx.z; sample < (batch); sample += gridDim.z)

// Element-wise kernels take kWidth consecutive elements a thread: a group of
// 16 bytes (8 bf16, 4 floats), read and written with one memory instruction,
// where every pointer is 16-byte aligned and rows hold whole groups, else 1.
// One 2-byte access an element leaves much of a GPU's memory bandwidth unused.
template <typename T, int kWidth>
struct alignas(sizeof(T) * kWidth) Elements {
  T v[kWidth];
};
template <typename T>
inline constexpr int kWideGroup = 16 / int(sizeof(T));

template <int kWidth, typename T>
__device__ __forceinline__ Elements<T, kWidth> load_elements(const T* p) {
#if HONE_CUDA_EMULATOR
  emulator::check_aligned(p, alignof(Elements<T, kWidth>));
#endif
  return *reinterpret_cast<const Elements<T, kWidth>*>(p);
}
template <int kWidth, typename T>
__device__ __forceinline__ void store_elements(T* p, const Elements<T, kWidth>& e) {
#if HONE_CUDA_EMULATOR
  emulator::check_aligned(p, alignof(Elements<T, kWidth>));
#endif
  *reinterpret_cast<Elements<T, kWidth>*>(p) = e;
}

// Whether p can be read in vectors of `bytes` (null can: nothing is read).
inline bool aligned_to(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Whether rows of `row_length` elements at these pointers take 16-byte groups of T.
template <typename T>
bool wide_groups_fit(int64_t row_length, std::initializer_list<const void*> pointers) {
  if (row_length % kWideGroup<T> != 0) return false;
  for (const void* p : pointers) {
    if (!aligned_to(p, 16)) return false;
  }
  return true;
}

// Calls launch.template operator()<kWidth>() with kWidth = 16-byte groups of T
// where `wide`, else single elements.
template <typename T, typename Launch>
void with_group_width(bool wide, Launch&& launch) {
  if (wide) launch.template operator()<kWideGroup<T>>();
  else launch.template operator()<1>();
}

// The same, passing blocks enough for n elements so grouped.
template <typename T, typename Launch>
void launch_grouped(int64_t n, bool wide, int threads, Launch&& launch) {
  with_group_width<T>(wide, [&]<int kWidth>() { launch.template operator()<kWidth>(blocks_for(n / kWidth, threads)); });
}

// The same for kernels over rows of `cols` elements (HONE_ROW_STRIDE): the
// RowsLaunch for rows of cols / kWidth groups.
template <typename T, typename Launch>
void launch_grouped_rows(int64_t rows, int64_t cols, bool wide, int threads, Launch&& launch) {
  with_group_width<T>(wide, [&]<int kWidth>() {
    launch.template operator()<kWidth>(rows_launch(rows, cols / kWidth, threads));
  });
}

// kWidth floats from p (an f32 parameter beside a group of kWidth elements),
// 16 bytes at a time where kWidth allows: p is then 16-byte aligned.
template <int kWidth>
__device__ __forceinline__ void load_floats(const float* p, float (&out)[kWidth]) {
  // Constant trip counts: nvcc unrolls these without a pragma (which host
  // compilers including this header for the emulator would warn about).
  if constexpr (kWidth % 4 == 0) {
    for (int i = 0; i < kWidth; i += 4) {
      const auto e = load_elements<4>(p + i);
      for (int k = 0; k < 4; ++k) out[i + k] = e.v[k];
    }
  } else {
    for (int i = 0; i < kWidth; ++i) out[i] = p[i];
  }
}

}  // namespace hone::kernels::cuda
