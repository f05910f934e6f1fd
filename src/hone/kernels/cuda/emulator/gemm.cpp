// The CUDA emulator's matrix products: the CPU's GEMM (device memory is host
// memory here) in place of cuBLASLt's, the epilogue run after it as where
// cuBLASLt does not take it. The kernels around them are what the emulator checks.
#include "hone/kernels/cuda/gemm.hpp"

#include "hone/kernels/cuda/check.hpp"

namespace hone::kernels::cuda {

void detail::product(const GemmArgs& args, const Epilogue& epilogue, void*) {
  emulator::in_place_of_stream(stream(), "a matrix product (the CPU's, for cuBLASLt's)", "",
                               [&] { cpu::gemm(unfused(args, epilogue)); });
  apply_epilogue(args, epilogue);
}

}  // namespace hone::kernels::cuda
