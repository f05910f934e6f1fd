#include <optional>

#include "hone/kernels/cpu/cross_entropy.hpp"
#include "hone/kernels/cpu/reduce.hpp"
#include "hone/ops/dispatch.hpp"
#include "hone/ops/ops.hpp"

#ifdef HONE_WITH_CUDA
#include "hone/kernels/cuda/cross_entropy.hpp"
#endif

namespace hone::ops {

using namespace detail;

namespace {

void check_loss_args(const char* op, const Tensor& logits, const Tensor& targets, const Tensor& per_row) {
  HONE_CHECK(logits.ndim() == 2, "{}: logits have shape {}, expected [rows, vocab]", op, logits.shape().str());
  expect_dtype(op, "targets", targets, DType::i32);
  expect_shape(op, "targets", targets, {logits.size(0)});
  expect_shape(op, "per-row buffer", per_row, {logits.size(0)});
  expect_dtype(op, "per-row buffer", per_row, compute_dtype(logits.dtype()));
}

// The part the logits' columns hold, checked, with `columns` and `classes`
// filled in; rows longer than its columns must be padded_row_length's.
VocabPart checked_logits_part(const char* op, VocabPart part, const Tensor& logits) {
  const int64_t width = logits.size(1);
  if (part.columns == 0) part.columns = width;
  HONE_CHECK(width == part.columns || width == padded_row_length(part.columns, logits.dtype()),
             "{}: logits rows of {} for {} classes are neither packed nor padded to 16 bytes ({})", op, width,
             part.columns, padded_row_length(part.columns, logits.dtype()));
  return checked_vocab_part(op, part, part.columns);
}

}  // namespace

namespace {

// The forward pass, and with a gradient scale the backward pass fused into it
// (whole vocabulary only).
LossSum loss_forward(const char* op, const Tensor& logits, const Tensor& targets, const Tensor& losses,
                     const Tensor& lse, VocabPart part, std::optional<double> gradient_scale) {
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&logits, &targets, &losses, &lse});
  check_loss_args(op, logits, targets, losses);
  check_loss_args(op, logits, targets, lse);
  const int64_t rows = logits.size(0), ld = logits.size(1);
  part = checked_logits_part(op, part, logits);
  HONE_CHECK(!gradient_scale || (part.first == 0 && part.classes == part.columns),
             "{}: needs the whole vocabulary's logits", op);
  const int64_t vocab = part.classes, columns = part.columns;
  auto fail_target = [&](int32_t target, int64_t row) {
    fail("{}: target {} at row {} is outside the vocabulary of {}", op, target, row, vocab);
  };
  LossSum result;
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    // The device sums the losses and counts and checks the targets in the same pass.
    dispatch_cuda(logits.dtype(), op, [&]<typename T>() {
      const kernels::cuda::LossTotals totals =
          gradient_scale ? kernels::cuda::cross_entropy_forward_backward<T>(
                               logits.data<T>(), targets.data<int32_t>(), losses.data<float>(), lse.data<float>(),
                               *gradient_scale, rows, columns, ld, kIgnoreIndex)
                         : kernels::cuda::cross_entropy_forward<T>(logits.data<T>(), targets.data<int32_t>(),
                                                                   losses.data<float>(), lse.data<float>(), rows,
                                                                   columns, ld, kIgnoreIndex, part.first, vocab);
      // (With the gradient, the logits already hold garbage where a target is bad.)
      if (totals.bad_row >= 0) fail_target(totals.bad_target, totals.bad_row);
      result = {.sum = totals.sum, .tokens = totals.tokens};
    });
    return result;
  }
#endif
  const int32_t* t = targets.data<int32_t>();
  for (int64_t row = 0; row < rows; ++row) {
    if (t[row] == kIgnoreIndex) continue;
    if (t[row] < 0 || t[row] >= vocab) fail_target(t[row], row);
    ++result.tokens;
  }
  dispatch_floating(logits.dtype(), op, [&]<typename T>() {
    using C = compute_t<T>;
    if (gradient_scale) {
      kernels::cpu::cross_entropy_forward_backward<T>(logits.data<T>(), t, losses.data<C>(), lse.data<C>(),
                                                      *gradient_scale, rows, columns, ld, kIgnoreIndex);
    } else {
      kernels::cpu::cross_entropy_forward<T>(logits.data<T>(), t, losses.data<C>(), lse.data<C>(), rows, columns,
                                             ld, kIgnoreIndex, part.first);
    }
    const C* l = losses.data<C>();
    result.sum = kernels::cpu::sum_elements(rows, [&](int64_t i) { return double(l[i]); });
  });
  return result;
}

}  // namespace

LossSum cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& lse,
                              VocabPart part) {
  return loss_forward("cross_entropy", logits, targets, losses, lse, part, std::nullopt);
}

LossSum cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                                       const Tensor& lse, double scale, VocabPart part) {
  return loss_forward("cross_entropy with gradient", logits, targets, losses, lse, part, scale);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, double scale,
                            VocabPart part, const Tensor& row_weights) {
  const char* op = "cross_entropy backward";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&logits, &targets, &lse, &row_weights});
  check_loss_args(op, logits, targets, lse);
  if (row_weights.defined()) {
    expect_shape(op, "row weights", row_weights, {logits.size(0)});
    expect_dtype(op, "row weights", row_weights, lse.dtype());
  }
  part = checked_logits_part(op, part, logits);
  const int64_t rows = logits.size(0), ld = logits.size(1);
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(logits.dtype(), op, [&]<typename T>() {
      kernels::cuda::cross_entropy_backward<T>(logits.data<T>(), targets.data<int32_t>(), lse.data<float>(), scale,
                                               rows, part.columns, ld, kIgnoreIndex, part.first,
                                               row_weights.defined() ? row_weights.data<float>() : nullptr);
    });
  }
#endif
  dispatch_floating(logits.dtype(), op, [&]<typename T>() {
    kernels::cpu::cross_entropy_backward<T>(
        logits.data<T>(), targets.data<int32_t>(), lse.data<compute_t<T>>(), scale, rows, part.columns, ld,
        kIgnoreIndex, part.first, row_weights.defined() ? row_weights.data<compute_t<T>>() : nullptr);
  });
}

}  // namespace hone::ops
