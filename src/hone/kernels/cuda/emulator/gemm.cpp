// The CUDA emulator's matrix products: the CPU's GEMM (device memory is host
// memory here) in place of cuBLASLt's, the bias added after as where cuBLASLt
// has no bias epilogue. The kernels around them are what the emulator checks.
#include "hone/core/allocator.hpp"
#include "hone/kernels/cuda/gemm.hpp"
#include "hone/kernels/cuda/runtime.hpp"

namespace hone::kernels::cuda {

void detail::product(const GemmArgs& args, const float* bias) {
  // cuBLASLt's workspace, taken with the first product and kept as cublaslt.cpp
  // does, so that memory peaks and the estimates that count it agree here too.
  static void* const workspace = allocator_for(Device::cuda(current_device())).allocate(kWorkspaceBytes);
  (void)workspace;
  cpu::gemm(args);
  if (bias != nullptr) add_bias_to_rows(args, bias);
}

}  // namespace hone::kernels::cuda
