#include "hone/kernels/cuda/gemm.hpp"

#include "hone/core/allocator.hpp"
#include "hone/core/error.hpp"
#include "hone/kernels/cuda/check.hpp"
#include "hone/kernels/cuda/elementwise.hpp"
#include "hone/kernels/cuda/runtime.hpp"

namespace hone::kernels::cuda {

void detail::add_bias_to_rows(const GemmArgs& g, const float* bias) {
  if (g.c_type == DType::bf16) add_bias(static_cast<bf16*>(g.c), bias, g.batch * g.m, g.n);
  else add_bias(static_cast<float*>(g.c), bias, g.batch * g.m, g.n);
}

namespace {

// cuBLASLt's workspace, from the tensor allocator so that memory/allocated_mem
// and the memory estimates count it (in the emulator's build too). A failed
// allocation throws, and the next product tries again.
void* workspace() {
  static void* const memory = allocator_for(Device::cuda(current_device())).allocate(kWorkspaceBytes);
  return memory;
}

}  // namespace

void gemm(const GemmArgs& g, const float* bias) {
  HONE_ASSERT(g.batch >= 0 && g.m >= 0 && g.n >= 0 && g.k >= 0);
  if (g.batch == 0 || g.m == 0 || g.n == 0) return;
  HONE_CHECK((g.ab_type == DType::f32 && g.c_type == DType::f32) ||
                 (g.ab_type == DType::bf16 && (g.c_type == DType::f32 || g.c_type == DType::bf16)),
             "no CUDA GEMM for {} operands with a {} result", dtype_name(g.ab_type), dtype_name(g.c_type));
  if (g.k == 0) {
    // An empty reduction: C = beta·C, as the CPU path (which allows beta 0 or 1).
    HONE_ASSERT(g.beta == 0.0f || g.beta == 1.0f);
    const size_t bytes = size_t(g.batch * g.m * g.n) * dtype_size(g.c_type);
    if (g.beta == 0.0f) HONE_CUDA_CHECK(cudaMemsetAsync(g.c, 0, bytes, stream()));
    if (bias != nullptr) detail::add_bias_to_rows(g, bias);
    return;
  }
  detail::product(g, bias, workspace());
}

}  // namespace hone::kernels::cuda
