#include "hone/kernels/cuda/gemm.hpp"

#include "hone/core/allocator.hpp"
#include "hone/core/error.hpp"
#include "hone/core/profiler.hpp"
#include "hone/kernels/cuda/activation.hpp"
#include "hone/kernels/cuda/check.hpp"
#include "hone/kernels/cuda/elementwise.hpp"
#include "hone/kernels/cuda/runtime.hpp"

namespace hone::kernels::cuda {

GemmArgs detail::unfused(const GemmArgs& g, const Epilogue& e) {
  GemmArgs plain = g;
  if (e.gelu == Epilogue::Gelu::forward) plain.c = e.aux;
  return plain;
}

void detail::apply_epilogue(const GemmArgs& g, const Epilogue& e) {
  auto on = [&]<typename T>() {
    const int64_t rows = g.batch * g.m, count = rows * g.n;
    T* const c = static_cast<T*>(g.c);
    T* const aux = static_cast<T*>(e.aux);
    if (e.bias != nullptr) add_bias(static_cast<T*>(unfused(g, e).c), e.bias, rows, g.n);
    if (e.gelu == Epilogue::Gelu::forward) cuda::gelu_forward<T>(aux, c, count, GeluApproximation::tanh);
    if (e.gelu == Epilogue::Gelu::backward) cuda::gelu_backward<T>(c, aux, c, count, GeluApproximation::tanh);
  };
  if (g.c_type == DType::bf16) on.operator()<bf16>();
  else on.operator()<float>();
}

namespace {

// cuBLASLt's workspace, from the tensor allocator so that memory/allocated_mem
// and the memory estimates count it (in the emulator's build too). A failed
// allocation throws, and the next product tries again.
void* workspace() {
  static void* const memory = allocator_for(Device::cuda(current_device())).allocate(kWorkspaceBytes);
  return memory;
}

// How HONE_PROFILE=products names what a product fuses.
const char* epilogue_name(const Epilogue& e) {
  const bool bias = e.bias != nullptr;
  switch (e.gelu) {
    case Epilogue::Gelu::forward: return bias ? "+bias+gelu" : "+gelu";
    case Epilogue::Gelu::backward: return "+dgelu";
    case Epilogue::Gelu::none: break;
  }
  return bias ? "+bias" : "";
}

}  // namespace

void gemm(const GemmArgs& g, const Epilogue& epilogue) {
  HONE_ASSERT(g.batch >= 0 && g.m >= 0 && g.n >= 0 && g.k >= 0);
  if (g.batch == 0 || g.m == 0 || g.n == 0) return;
  const ProductTimer timer(g.batch, g.m, g.n, g.k, g.trans_a, g.trans_b, epilogue_name(epilogue), /*on_device=*/true);
  HONE_CHECK((g.ab_type == DType::f32 && g.c_type == DType::f32) ||
                 (g.ab_type == DType::bf16 && (g.c_type == DType::f32 || g.c_type == DType::bf16)),
             "no CUDA GEMM for {} operands with a {} result", dtype_name(g.ab_type), dtype_name(g.c_type));
  // Epilogues run on packed rows; GELU's follow a linear layer's product, which overwrites C.
  HONE_ASSERT(g.batch == 1 || g.packed());
  HONE_ASSERT((epilogue.bias == nullptr && epilogue.gelu == Epilogue::Gelu::none) || g.packed());
  HONE_ASSERT(epilogue.gelu == Epilogue::Gelu::none ||
              (epilogue.aux != nullptr && g.batch == 1 && g.beta == 0.0f &&
               (epilogue.gelu == Epilogue::Gelu::forward || epilogue.bias == nullptr)));
  if (g.k == 0) {
    // An empty reduction: C = beta·C, as the CPU path (which allows beta 0 or 1).
    HONE_ASSERT(g.beta == 0.0f || g.beta == 1.0f);
    const GemmArgs plain = detail::unfused(g, epilogue);
    if (g.beta == 0.0f) {
      // Packed: one block of rows; padded (batch 1): row by row, the padding untouched.
      const size_t element = dtype_size(g.c_type), stride = size_t(g.row_stride_c()) * element;
      const int64_t blocks = g.packed() ? 1 : g.m;
      const size_t block_bytes = size_t(g.packed() ? g.batch * g.m * g.n : g.n) * element;
      for (int64_t r = 0; r < blocks; ++r) {
        HONE_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(plain.c) + size_t(r) * stride, 0, block_bytes, stream()));
      }
    }
    detail::apply_epilogue(g, epilogue);
    return;
  }
  detail::product(g, epilogue, workspace());
}

}  // namespace hone::kernels::cuda
