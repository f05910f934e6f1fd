#pragma once
// Matrix multiplication on the GPU through cuBLASLt, with the CPU's interface
// (kernels/cpu/gemm.hpp): row-major operands, optional transposes, a batch of
// consecutive matrices, alpha and beta. f32·f32→f32 in full fp32 (no TF32, as
// PyTorch's default); bf16·bf16→f32|bf16 accumulating in fp32.
#include <cstddef>

#include "hone/kernels/cpu/gemm.hpp"

namespace hone::kernels::cuda {

using GemmArgs = cpu::GemmArgs;

// What follows the product on C, in cuBLASLt's epilogue where it takes it (see
// cublaslt.cpp), else by kernels after a plain product.
struct Epilogue {
  const float* bias = nullptr;  // f32 [n] device memory, added to every row of C
  // GPT-2's tanh GELU, the only one cuBLASLt's epilogues compute. forward: `aux`
  // receives the product (+ bias) and C its GELU, the MLP's pre-activation and
  // activation; backward: C becomes C ⊙ gelu'(aux), the up projection's output
  // gradient from the down projection's input gradient. aux is [m, n] of C's type.
  enum class Gelu { none, forward, backward } gelu = Gelu::none;
  void* aux = nullptr;
};

void gemm(const GemmArgs& args, const Epilogue& epilogue = {});

namespace detail {
// gemm() past its checks and the empty cases: cuBLASLt's product (cublaslt.cpp)
// or, in the CUDA emulator's build, the CPU's (emulator/gemm.cpp). `workspace`
// holds kWorkspaceBytes.
void product(const GemmArgs& args, const Epilogue& epilogue, void* workspace);
// Where the epilogue is not fused: the plain product goes to unfused(...)'s C
// (aux for the forward GELU), then apply_epilogue runs the epilogue's kernels.
GemmArgs unfused(const GemmArgs& args, const Epilogue& epilogue);
void apply_epilogue(const GemmArgs& args, const Epilogue& epilogue);
}  // namespace detail

// cuBLASLt's workspace (what it recommends for Hopper; Ampere needs less), taken
// from the caching allocator with the first product and kept.
inline constexpr size_t kWorkspaceBytes = size_t(32) << 20;

}  // namespace hone::kernels::cuda
