// GEMM and linear layers.
#include "hone/kernels/cpu/elementwise.hpp"
#include "hone/kernels/cpu/gemm.hpp"
#include "hone/ops/dispatch.hpp"
#include "hone/ops/ops.hpp"

#ifdef HONE_WITH_CUDA
#include "hone/kernels/cuda/elementwise.hpp"
#include "hone/kernels/cuda/gemm.hpp"
#endif

namespace hone::ops {

using namespace detail;

namespace {

// C = op(A)·op(B) on the device of the operands.
void gemm_on(Device device, const kernels::cpu::GemmArgs& args) {
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) return kernels::cuda::gemm(args);
#endif
  (void)device;
  kernels::cpu::gemm(args);
}

// A linear layer's checked arguments: y = x·weightᵀ as a GEMM, and the bias
// (absent, or f32 [out] on CUDA, in y's compute type on the CPU).
struct LinearProduct {
  kernels::cpu::GemmArgs args;
  Tensor bias;
};

// The row length of `outputs` (y, or dy) of a product with `out` features:
// `out`, or padded_row_length(out) where padding is allowed.
int64_t checked_output_rows(const char* op, const Tensor& outputs, int64_t out, bool padding_allowed) {
  const int64_t length = outputs.size(-1);
  const bool padded = outputs.ndim() == 2 && length == padded_row_length(out, outputs.dtype());
  HONE_CHECK(length == out || (padding_allowed && padded), "{}: {} has rows of {} for {} output features{}", op,
             outputs.shape().str(), length, out,
             padded ? " (padded rows are only for products with no bias and no fused activation)" : "");
  return length;
}

LinearProduct checked_linear(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                             const Tensor& y, bool padding_allowed) {
  HONE_CHECK(weight.ndim() == 2, "{}: weight has shape {}, expected [out, in]", op, weight.shape().str());
  const int64_t out = weight.size(0), in = weight.size(1), rows = rows_of(x);
  HONE_CHECK(x.size(-1) == in && rows_of(y) == rows, "{}: input {} and output {} do not fit weight {}", op,
             x.shape().str(), y.shape().str(), weight.shape().str());
  const int64_t ldc = checked_output_rows(op, y, out, padding_allowed && !bias.defined());
  expect_dtype(op, "weight", weight, x.dtype());  // one operand type for the GEMM
  if (bias.defined()) expect_shape(op, "bias", bias, {out});
  // Read-only parameters may be T (ops.hpp); the kernels take the compute type.
  LinearProduct p{.args = {.m = rows, .n = out, .k = in, .trans_b = true, .a = x.raw(), .b = weight.raw(),
                           .c = y.raw(), .ab_type = x.dtype(), .c_type = y.dtype(), .ldc = ldc},
                  .bias = parameter_in_compute_dtype(bias, y.dtype())};
  if (y.device().is_cuda() && p.bias.defined()) expect_dtype(op, "bias", p.bias, DType::f32);
  return p;
}

// dx = dy·weight (+ dx where accumulating) as a GEMM; dy's rows may be padded.
kernels::cpu::GemmArgs input_gradient_args(const Tensor& dy, const Tensor& weight, const Tensor& dx,
                                           bool accumulate) {
  return {.m = rows_of(dy), .n = weight.size(1), .k = weight.size(0), .beta = accumulate ? 1.0f : 0.0f,
          .a = dy.raw(), .b = weight.raw(), .c = dx.raw(), .ab_type = dy.dtype(), .c_type = dx.dtype(),
          .lda = dy.size(-1)};
}

#ifdef HONE_WITH_CUDA
// cuBLASLt computes only the tanh GELU in its epilogues, and may do so less
// exactly than fp32 (it does not say how): fused in bf16 alone, whose rounding
// (2^-8) is coarser than the hardware's tanh approximation (2^-11).
bool gelu_in_epilogue(Device device, DType dtype, GeluApproximation approximation) {
  return device.is_cuda() && dtype == DType::bf16 && approximation == GeluApproximation::tanh;
}
#endif

}  // namespace

int64_t padded_row_length(int64_t columns, DType dtype) {
  const auto group = int64_t(16 / dtype_size(dtype));  // f64: 2, f32: 4, bf16: 8 elements
  return (columns + group - 1) / group * group;
}

size_t gemm_workspace_bytes(Device device) {
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) return kernels::cuda::kWorkspaceBytes;
#endif
  (void)device;
  return 0;
}

void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, float alpha, float beta) {
  const char* op = "matmul";
  const OpTimer timer(op);
  const Device device = op_device(op, {&a, &b, &c});
  HONE_CHECK(a.ndim() >= 2 && a.ndim() == b.ndim() && a.ndim() == c.ndim(),
             "{}: operands of shapes {}, {}, {} are not matrices of one batch", op, a.shape().str(), b.shape().str(),
             c.shape().str());
  HONE_CHECK(a.dtype() == b.dtype(), "{}: operands are {} and {}", op, dtype_name(a.dtype()), dtype_name(b.dtype()));
  const int n = a.ndim();
  const int64_t m = c.size(n - 2), cols = c.size(n - 1);
  const int64_t k = trans_a ? a.size(n - 2) : a.size(n - 1);
  int64_t batch = 1;  // from the leading sizes: c.numel() / (m · cols) is 0 / 0 where c is empty
  for (int d = 0; d < n - 2; ++d) batch *= c.size(d);
  HONE_CHECK((trans_a ? a.size(n - 1) : a.size(n - 2)) == m && (trans_b ? b.size(n - 1) : b.size(n - 2)) == k &&
                 (trans_b ? b.size(n - 2) : b.size(n - 1)) == cols && a.numel() == batch * m * k &&
                 b.numel() == batch * k * cols,
             "{}: shapes {}{} x {}{} -> {} do not match", op, a.shape().str(), trans_a ? "ᵀ" : "", b.shape().str(),
             trans_b ? "ᵀ" : "", c.shape().str());
  gemm_on(device, {.batch = batch, .m = m, .n = cols, .k = k, .trans_a = trans_a, .trans_b = trans_b,
                   .alpha = alpha, .beta = beta, .a = a.raw(), .b = b.raw(), .c = c.raw(), .ab_type = a.dtype(),
                   .c_type = c.dtype()});
}

void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y) {
  const char* op = "linear";
  const OpTimer timer(op);
  const Device device = op_device(op, {&x, &weight, &bias, &y});
  const LinearProduct p = checked_linear(op, x, weight, bias, y, /*padding_allowed=*/true);
#ifdef HONE_WITH_CUDA
  // The bias goes into the GEMM's epilogue where cuBLASLt can add it there.
  if (device.is_cuda()) return kernels::cuda::gemm(p.args, {.bias = data_or_null<const float>(p.bias)});
#endif
  gemm_on(device, p.args);
  if (p.bias.defined()) {
    dispatch_floating(y.dtype(), op, [&]<typename T>() {
      kernels::cpu::add_bias<T>(y.data<T>(), p.bias.data<compute_t<T>>(), p.args.m, p.args.n);
    });
  }
}

void linear_gelu_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& pre,
                         const Tensor& y, GeluApproximation approximation) {
  const char* op = "linear + gelu";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&x, &weight, &bias, &pre, &y});
  expect_shape(op, "activation", y, pre.shape());
  expect_dtype(op, "activation", y, pre.dtype());
#ifdef HONE_WITH_CUDA
  if (gelu_in_epilogue(device, y.dtype(), approximation)) {
    const LinearProduct p = checked_linear(op, x, weight, bias, y, /*padding_allowed=*/false);
    return kernels::cuda::gemm(p.args, {.bias = data_or_null<const float>(p.bias),
                                        .gelu = kernels::cuda::Epilogue::Gelu::forward,
                                        .aux = pre.raw()});
  }
#endif
  linear_forward(x, weight, bias, pre);
  gelu_forward(pre, y, approximation);
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dx,
                     const Tensor& d_weight, const Tensor& d_bias, bool accumulate_dx, bool accumulate_dw) {
  const char* op = "linear backward";
  const OpTimer timer(op);
  const Device device = op_device(op, {&dy, &x, &weight, &dx, &d_weight, &d_bias});
  const int64_t out = weight.size(0), in = weight.size(1), rows = rows_of(x);
  HONE_CHECK(x.size(-1) == in && rows_of(dy) == rows, "{}: gradient {} and input {} do not fit weight {}", op,
             dy.shape().str(), x.shape().str(), weight.shape().str());
  const int64_t lda = checked_output_rows(op, dy, out, /*padding_allowed=*/!d_bias.defined());
  expect_dtype(op, "weight", weight, dy.dtype());  // one operand type for the GEMMs
  expect_dtype(op, "input", x, dy.dtype());
  if (dx.defined()) {
    HONE_CHECK(dx.shape() == x.shape(), "{}: input gradient {} for input {}", op, dx.shape().str(), x.shape().str());
    gemm_on(device, input_gradient_args(dy, weight, dx, accumulate_dx));
  }
  if (d_weight.defined()) {
    expect_shape(op, "weight gradient", d_weight, weight.shape());
    gemm_on(device, {.m = out, .n = in, .k = rows, .trans_a = true, .beta = accumulate_dw ? 1.0f : 0.0f,
                     .a = dy.raw(), .b = x.raw(), .c = d_weight.raw(), .ab_type = dy.dtype(),
                     .c_type = d_weight.dtype(), .lda = lda});
  }
  if (d_bias.defined()) {
    expect_shape(op, "bias gradient", d_bias, {out});
#ifdef HONE_WITH_CUDA
    if (device.is_cuda()) {
      return dispatch_cuda(dy.dtype(), op, [&]<typename T>() {
        kernels::cuda::bias_backward<T>(dy.data<T>(), d_bias.data<float>(), rows, out);
      });
    }
#endif
    dispatch_floating(dy.dtype(), op, [&]<typename T>() {
      kernels::cpu::bias_backward<T>(dy.data<T>(), d_bias.data<compute_t<T>>(), rows, out);
    });
  }
}

void linear_gelu_input_backward(const Tensor& dy, const Tensor& weight, const Tensor& pre, const Tensor& d_pre,
                                GeluApproximation approximation) {
  const char* op = "linear + gelu backward";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&dy, &weight, &pre, &d_pre});
  HONE_CHECK(weight.ndim() == 2 && dy.size(-1) == weight.size(0) && pre.size(-1) == weight.size(1) &&
                 rows_of(dy) == rows_of(pre),
             "{}: gradient {} and pre-activation {} do not fit weight {}", op, dy.shape().str(), pre.shape().str(),
             weight.shape().str());
  expect_shape(op, "pre-activation gradient", d_pre, pre.shape());
  expect_dtype(op, "weight", weight, dy.dtype());  // one operand type for the GEMM
  expect_dtype(op, "pre-activation", pre, d_pre.dtype());
  const kernels::cpu::GemmArgs args = input_gradient_args(dy, weight, d_pre, /*accumulate=*/false);
#ifdef HONE_WITH_CUDA
  if (gelu_in_epilogue(device, d_pre.dtype(), approximation)) {
    return kernels::cuda::gemm(args, {.gelu = kernels::cuda::Epilogue::Gelu::backward, .aux = pre.raw()});
  }
#endif
  gemm_on(device, args);
  gelu_backward(d_pre, pre, d_pre, approximation);
}

}  // namespace hone::ops
