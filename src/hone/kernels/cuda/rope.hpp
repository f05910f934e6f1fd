#pragma once
// Rotary position embedding on the GPU, in place, with the semantics of
// kernels/cpu/rope.hpp ("rotate half" pairs, packed-sequence positions).
#include <cstdint>

#include "hone/core/dtype.hpp"

namespace hone::kernels::cuda {

// positions: null, or device memory [batch·seq] (each row's position).
template <typename T>
void rope_apply(T* x, const float* cos, const float* sin, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                int64_t row_stride, int64_t position_offset, bool inverse, const int32_t* positions);

}  // namespace hone::kernels::cuda
