#pragma once
// The GPU runtime that hone's kernels are compiled against. They are written
// with CUDA's names; compiled as HIP for AMD GPUs (clang's -x hip, which
// defines __HIP__: the HIP build check, cmake/hip_check.cmake) the few runtime
// names they use are mapped onto HIP's here, and common.cuh maps the warp
// shuffles. Nothing else in a kernel file may differ between the two. Built
// with HONE_CUDA_EMULATOR, the CUDA names come from hone's emulator instead,
// which runs the same kernels on the CPU.
#if defined(__HIP__)

#include <hip/hip_runtime.h>

#define HONE_HIP 1

using cudaError_t = hipError_t;
using cudaStream_t = hipStream_t;
using cudaFuncAttributes = hipFuncAttributes;
inline constexpr hipError_t cudaSuccess = hipSuccess;
inline constexpr hipMemcpyKind cudaMemcpyDeviceToDevice = hipMemcpyDeviceToDevice;
inline constexpr hipFuncAttribute cudaFuncAttributeMaxDynamicSharedMemorySize =
    hipFuncAttributeMaxDynamicSharedMemorySize;

inline hipError_t cudaGetLastError() { return hipGetLastError(); }
inline hipError_t cudaMemsetAsync(void* dst, int value, size_t bytes, hipStream_t stream) {
  return hipMemsetAsync(dst, value, bytes, stream);
}
inline hipError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, hipMemcpyKind kind, hipStream_t stream) {
  return hipMemcpyAsync(dst, src, bytes, kind, stream);
}
template <typename Kernel>
hipError_t cudaFuncGetAttributes(hipFuncAttributes* attributes, Kernel* kernel) {
  return hipFuncGetAttributes(attributes, reinterpret_cast<const void*>(kernel));
}
template <typename Kernel>
hipError_t cudaFuncSetAttribute(Kernel* kernel, hipFuncAttribute attribute, int value) {
  return hipFuncSetAttribute(reinterpret_cast<const void*>(kernel), attribute, value);
}

#elif HONE_CUDA_EMULATOR

// The kernels on the CPU, for tests where no GPU is (emulator/emulator.hpp).
#include "hone/kernels/cuda/emulator/emulator.hpp"

#define HONE_HIP 0

#else

#include <cuda_runtime.h>

#define HONE_HIP 0

#endif
