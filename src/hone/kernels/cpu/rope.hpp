#pragma once
// Rotary position embedding in the "rotate half" layout of Hugging Face Llama
// checkpoints: dimension i of a head pairs with dimension i + head_dim/2.
#include <cstdint>

#include "hone/core/dtype.hpp"

namespace hone::kernels::cpu {

// Rotates, in place, the first `heads` heads of every row of x (for a fused qkv
// row: the query heads followed by the key heads). Row (b, t) sits at
// x + (b·seq + t)·row_stride and has position position_offset + t, or
// positions[b·seq + t] when given (packed sequences); cos and sin are
// [positions, head_dim/2] tables. inverse = true rotates back, which is the
// backward pass (the rotation is orthogonal).
template <typename T>
void rope_apply(T* x, const compute_t<T>* cos, const compute_t<T>* sin, int64_t batch, int64_t seq, int64_t heads,
                int64_t head_dim, int64_t row_stride, int64_t position_offset, bool inverse,
                const int32_t* positions = nullptr);

}  // namespace hone::kernels::cpu
