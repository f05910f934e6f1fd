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

// C = op(A)·op(B) (+ bias) on the device of the operands.
void gemm_on(Device device, const kernels::cpu::GemmArgs& args, const float* bias = nullptr) {
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) return kernels::cuda::gemm(args, bias);
#endif
  HONE_ASSERT(bias == nullptr);
  kernels::cpu::gemm(args);
}

}  // namespace

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
  HONE_CHECK(weight.ndim() == 2, "{}: weight has shape {}, expected [out, in]", op, weight.shape().str());
  const int64_t out = weight.size(0), in = weight.size(1), rows = rows_of(x);
  HONE_CHECK(x.size(-1) == in && y.size(-1) == out && rows_of(y) == rows,
             "{}: input {} and output {} do not fit weight {}", op, x.shape().str(), y.shape().str(),
             weight.shape().str());
  expect_dtype(op, "weight", weight, x.dtype());  // one operand type for the GEMM
  const kernels::cpu::GemmArgs args{.m = rows, .n = out, .k = in, .trans_b = true, .a = x.raw(), .b = weight.raw(),
                                    .c = y.raw(), .ab_type = x.dtype(), .c_type = y.dtype()};
  if (bias.defined()) expect_shape(op, "bias", bias, {out});
  // Read-only parameters may be T (ops.hpp); the kernels take the compute type.
  const Tensor b = parameter_in_compute_dtype(bias, y.dtype());
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    // The bias goes into the GEMM's epilogue where cuBLASLt can add it there.
    if (b.defined()) expect_dtype(op, "bias", b, DType::f32);
    return gemm_on(device, args, data_or_null<const float>(b));
  }
#endif
  gemm_on(device, args);
  if (b.defined()) {
    dispatch_floating(y.dtype(), op, [&]<typename T>() {
      kernels::cpu::add_bias<T>(y.data<T>(), b.data<compute_t<T>>(), rows, out);
    });
  }
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dx,
                     const Tensor& d_weight, const Tensor& d_bias, bool accumulate_dx, bool accumulate_dw) {
  const char* op = "linear backward";
  const OpTimer timer(op);
  const Device device = op_device(op, {&dy, &x, &weight, &dx, &d_weight, &d_bias});
  const int64_t out = weight.size(0), in = weight.size(1), rows = rows_of(x);
  HONE_CHECK(x.size(-1) == in && dy.size(-1) == out && rows_of(dy) == rows,
             "{}: gradient {} and input {} do not fit weight {}", op, dy.shape().str(), x.shape().str(),
             weight.shape().str());
  expect_dtype(op, "weight", weight, dy.dtype());  // one operand type for the GEMMs
  expect_dtype(op, "input", x, dy.dtype());
  if (dx.defined()) {
    HONE_CHECK(dx.shape() == x.shape(), "{}: input gradient {} for input {}", op, dx.shape().str(), x.shape().str());
    gemm_on(device, {.m = rows, .n = in, .k = out, .beta = accumulate_dx ? 1.0f : 0.0f, .a = dy.raw(),
                     .b = weight.raw(), .c = dx.raw(), .ab_type = dy.dtype(), .c_type = dx.dtype()});
  }
  if (d_weight.defined()) {
    expect_shape(op, "weight gradient", d_weight, weight.shape());
    gemm_on(device, {.m = out, .n = in, .k = rows, .trans_a = true, .beta = accumulate_dw ? 1.0f : 0.0f,
                     .a = dy.raw(), .b = x.raw(), .c = d_weight.raw(), .ab_type = dy.dtype(),
                     .c_type = d_weight.dtype()});
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

}  // namespace hone::ops
