#include "hone/ops/dispatch.hpp"

#include "hone/core/profiler.hpp"

#ifdef HONE_WITH_CUDA
#include "hone/kernels/cuda/runtime.hpp"
#endif

namespace hone::ops::detail {

Device op_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (first == nullptr) first = t;
    HONE_CHECK(t->device() == first->device(), "{}: tensors on {} and {}", op, first->device().str(),
               t->device().str());
  }
  HONE_ASSERT(first != nullptr);
  const Device device = first->device();
  if (device.is_cpu()) profile_op_on_host();
#ifdef HONE_WITH_CUDA
  // Also links the CUDA runtime into every program that runs ops, which
  // registers its allocator for Tensors on cuda.
  if (device.is_cuda()) kernels::cuda::check_device(device);
#endif
  return device;
}

Tensor on_device(const Tensor& t, Device device) {
  if (!t.defined() || t.device() == device) return t;
  return t.to(device);
}

void expect_shape(const char* op, const char* what, const Tensor& t, const Shape& shape) {
  HONE_CHECK(t.shape() == shape, "{}: {} has shape {}, expected {}", op, what, t.shape().str(), shape.str());
}

void expect_dtype(const char* op, const char* what, const Tensor& t, DType dtype) {
  HONE_CHECK(t.dtype() == dtype, "{}: {} is {}, expected {}", op, what, dtype_name(t.dtype()), dtype_name(dtype));
}

DType compute_dtype(DType activation) { return activation == DType::f64 ? DType::f64 : DType::f32; }

Tensor parameter_in_compute_dtype(const Tensor& vector, DType activation) {
  const DType want = compute_dtype(activation);
  // Only T itself is cast: any other dtype reaches the kernels' checks as it is.
  if (!vector.defined() || vector.dtype() != activation || activation == want) return vector;
  return cast_to(vector, want);
}

int64_t rows_of(const Tensor& t) {
  HONE_ASSERT(t.ndim() >= 1);
  int64_t rows = 1;  // not numel() / size(-1): a [5, 0] tensor has 5 rows
  for (int d = 0; d + 1 < t.ndim(); ++d) rows *= t.size(d);
  return rows;
}

VocabPart checked_vocab_part(const char* op, VocabPart part, int64_t held) {
  if (part.classes == 0) part.classes = held;
  HONE_CHECK(part.first >= 0 && part.first + held <= part.classes,
             "{}: a part of {} classes from {} does not fit a vocabulary of {}", op, held, part.first, part.classes);
  return part;
}

namespace {

// Every position of [batch, seq] in [0, t].
void check_position_values(const char* op, const Tensor& positions) {
  const int64_t batch = positions.size(0), seq = positions.size(1);
  const Tensor host = on_device(positions, Device::cpu());
  const int32_t* p = host.data<int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      const int32_t v = p[b * seq + t];
      HONE_CHECK(v >= 0 && v <= t, "{}: token {} of row {} has position {}, expected 0 to {}", op, t, b, v, t);
    }
  }
}

}  // namespace

Tensor token_positions_on(const char* op, const TokenPositions& token_positions, int64_t batch, int64_t seq,
                          int64_t limit, Device device) {
  const Tensor& positions = token_positions.tensor();
  if (!positions.defined()) return Tensor();
  expect_dtype(op, "token positions", positions, DType::i32);
  expect_shape(op, "token positions", positions, {batch, seq});
  // Positions are below seq: a table of `limit` rows holds them all.
  HONE_CHECK(seq <= limit, "{}: token positions up to {} do not fit a position table of {}", op, seq - 1, limit);
  if (!token_positions.is_checked()) check_position_values(op, positions);
  return on_device(positions, device);
}

}  // namespace hone::ops::detail

namespace hone::ops {

TokenPositions TokenPositions::checked(const Tensor& positions, Device device) {
  HONE_CHECK(positions.ndim() == 2, "token positions have shape {}, expected [batch, seq]", positions.shape().str());
  detail::expect_dtype("token positions", "token positions", positions, DType::i32);
  detail::check_position_values("token positions", positions);
  TokenPositions result(detail::on_device(positions, device));
  result.checked_ = true;
  return result;
}

}  // namespace hone::ops
