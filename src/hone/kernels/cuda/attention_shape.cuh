#pragma once
// One attention call as the CUDA kernels read it: the CUDA-core kernels of
// attention.cu (any head size, f32 and bf16) and the tensor-core kernels of
// attention_mma.cu (bf16, head sizes 64 and 128) take the same description.
#include <cstdint>

#include "hone/kernels/cuda/platform.hpp"  // __device__ for host files too

namespace hone::kernels::cuda {

struct AttentionShape {
  int64_t batch, seq, heads, kv_heads, head_dim, group, row_stride, out_stride;
  float scale;
  const float* slopes;      // [heads] or null
  const int32_t* positions; // [batch, seq] or null (packed sequences)
};

// The first key query t of row b may see: the start of its sample.
__device__ __forceinline__ int64_t window_start(const AttentionShape& s, int64_t b, int64_t t) {
  return s.positions ? t - int64_t(s.positions[b * s.seq + t]) : 0;
}

}  // namespace hone::kernels::cuda
