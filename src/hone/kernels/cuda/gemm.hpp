#pragma once
// Matrix multiplication on the GPU through cuBLASLt, with the CPU's interface
// (kernels/cpu/gemm.hpp): row-major operands, optional transposes, a batch of
// consecutive matrices, alpha and beta. f32·f32→f32 in full fp32 (no TF32, as
// PyTorch's default); bf16·bf16→f32|bf16 accumulating in fp32.
#include <cstddef>

#include "hone/kernels/cpu/gemm.hpp"

namespace hone::kernels::cuda {

using GemmArgs = cpu::GemmArgs;

// bias (f32 [n], device memory) is null or added to every row of C after the
// product: in cuBLASLt's epilogue where it takes it, else by a second kernel.
void gemm(const GemmArgs& args, const float* bias = nullptr);

namespace detail {
// gemm() past its checks and the empty cases: cuBLASLt's product (cublaslt.cpp)
// or, in the CUDA emulator's build, the CPU's (emulator/gemm.cpp). `workspace`
// holds kWorkspaceBytes.
void product(const GemmArgs& args, const float* bias, void* workspace);
// Adds bias to every row of C: where the product does not fuse it.
void add_bias_to_rows(const GemmArgs& args, const float* bias);
}  // namespace detail

// cuBLASLt's workspace (what it recommends for Hopper; Ampere needs less), taken
// from the caching allocator with the first product and kept.
inline constexpr size_t kWorkspaceBytes = size_t(32) << 20;

}  // namespace hone::kernels::cuda
