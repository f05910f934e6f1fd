#pragma once
// Shared by the op implementations: argument checks and dtype dispatch.
#include <initializer_list>
#include <type_traits>

#include "hone/core/profiler.hpp"
#include "hone/core/tensor.hpp"
#include "hone/ops/ops.hpp"

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

#ifdef HONE_WITH_CUDA
// Calls fn.template operator()<T>() with T the C++ type of a dtype that the CUDA
// kernels take (f32, bf16; f64 is the CPU's gradient-check path only).
template <typename Fn>
void dispatch_cuda(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::f32: fn.template operator()<float>(); return;
    case DType::bf16: fn.template operator()<bf16>(); return;
    default: fail("{}: no CUDA kernel for {} tensors (CUDA computes in f32 or bf16)", op, dtype_name(dtype));
  }
}
#endif

// The device that runs an op: every defined tensor must be on it (for CUDA, the
// device this process computes on). Each op branches on it to that device's kernels.
Device op_device(const char* op, std::initializer_list<const Tensor*> tensors);
// `t` on `device`: t itself when it is there, else a copy (small index tensors,
// such as token positions, that callers may keep on the host). Undefined stays so.
Tensor on_device(const Tensor& t, Device device);
// The data of an optional tensor, or null when it is absent.
template <typename T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<std::remove_const_t<T>>() : nullptr;
}
void expect_shape(const char* op, const char* what, const Tensor& t, const Shape& shape);
void expect_dtype(const char* op, const char* what, const Tensor& t, DType dtype);
// Parameters, their gradients and statistics use the compute type of activations.
DType compute_dtype(DType activation);
// A parameter vector (a norm's weight or bias, a linear bias: [dim] elements) in
// the compute type of `activation`, cast for this call when it is kept in T
// (ops.hpp: read-only parameters may be). Other dtypes, and undefined, stay so.
Tensor parameter_in_compute_dtype(const Tensor& vector, DType activation);
// Rows of a tensor viewed as [rows, last].
int64_t rows_of(const Tensor& t);
// A part of the vocabulary (ops.hpp VocabPart) of `held` classes, checked to
// fit, with `classes` filled in (0 means the part is the whole vocabulary).
VocabPart checked_vocab_part(const char* op, VocabPart part, int64_t held);
// Checks packed-sequence positions (see ops.hpp): i32 [batch, seq], each in
// [0, t] (read through a host copy where they are on a GPU, unless
// TokenPositions::checked did that already), and seq within `limit` (a
// position table's length). Returns them on `device` (see on_device), or an
// undefined tensor when they are absent.
Tensor token_positions_on(const char* op, const TokenPositions& token_positions, int64_t batch, int64_t seq,
                          int64_t limit, Device device);

}  // namespace hone::ops::detail
