// The CUDA emulator's matrix products: the CPU's GEMM (device memory is host
// memory here) in place of cuBLASLt's, the bias added after as where cuBLASLt
// has no bias epilogue. The kernels around them are what the emulator checks.
#include "hone/kernels/cuda/gemm.hpp"

namespace hone::kernels::cuda {

void detail::product(const GemmArgs& args, const float* bias, void*) {
  cpu::gemm(args);
  if (bias != nullptr) add_bias_to_rows(args, bias);
}

}  // namespace hone::kernels::cuda
