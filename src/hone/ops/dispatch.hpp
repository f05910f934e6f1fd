#pragma once
// Shared by the op implementations: argument checks and dtype dispatch.
#include <initializer_list>

#include "hone/core/profiler.hpp"
#include "hone/core/tensor.hpp"

namespace hone::ops::detail {

// Calls fn.template operator()<T>() with T the C++ type of a floating dtype.
template <typename Fn>
void dispatch_floating(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::f32: fn.template operator()<float>(); return;
    case DType::bf16: fn.template operator()<bf16>(); return;
    case DType::f64: fn.template operator()<double>(); return;
    default: fail("{}: no kernel for {} tensors", op, dtype_name(dtype));
  }
}

// The device that runs an op: every defined tensor must be on it. Until the CUDA
// backend dispatches an op, that op runs on the CPU only.
Device op_device(const char* op, std::initializer_list<const Tensor*> tensors);
void expect_shape(const char* op, const char* what, const Tensor& t, const Shape& shape);
void expect_dtype(const char* op, const char* what, const Tensor& t, DType dtype);
// Parameters, their gradients and statistics use the compute type of activations.
DType compute_dtype(DType activation);
// Rows of a tensor viewed as [rows, last].
int64_t rows_of(const Tensor& t);
// Checks packed-sequence positions (see ops.hpp): i32 [batch, seq], each in
// [0, t] and below `limit` (a position table's length). Returns the data pointer,
// or null when the tensor is absent.
const int32_t* token_positions_of(const char* op, const Tensor& token_positions, int64_t batch, int64_t seq,
                                  int64_t limit);

}  // namespace hone::ops::detail
