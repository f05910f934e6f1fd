#include "hone/kernels/cpu/norm.hpp"

#include <utility>

#include "hone/ops/dispatch.hpp"
#include "hone/ops/ops.hpp"

#ifdef HONE_WITH_CUDA
#include "hone/kernels/cuda/norm.hpp"
#endif

namespace hone::ops {

using namespace detail;

namespace {

// x is [..., dim]; weight (and bias) [dim]; statistics [rows].
void check_norm(const char* op, const Tensor& x, const Tensor& y, const Tensor& weight,
                std::initializer_list<const Tensor*> stats) {
  const int64_t dim = x.size(-1), rows = rows_of(x);
  HONE_CHECK(y.shape() == x.shape(), "{}: output {} for input {}", op, y.shape().str(), x.shape().str());
  expect_shape(op, "weight", weight, {dim});
  for (const Tensor* s : stats) expect_shape(op, "statistics", *s, {rows});
}

// A residual add's tensors: both or neither, of x's shape and dtype.
void check_residual(const char* op, const Tensor& x, const ResidualAdd& residual) {
  if (!residual.branch.defined() && !residual.sum.defined()) return;
  HONE_CHECK(residual.branch.defined() && residual.sum.defined(), "{}: a residual add needs a branch and a sum", op);
  for (const auto& [what, t] : {std::pair{"residual branch", &residual.branch}, {"residual sum", &residual.sum}}) {
    expect_shape(op, what, *t, x.shape());
    expect_dtype(op, what, *t, x.dtype());
  }
}

}  // namespace

void rmsnorm_forward(const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd, double eps,
                     const ResidualAdd& residual) {
  const char* op = residual.branch.defined() ? "add + rmsnorm" : "rmsnorm";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&x, &residual.branch, &residual.sum, &weight, &y, &rstd});
  check_norm(op, x, y, weight, {&rstd});
  check_residual(op, x, residual);
  // Read-only parameters may be T (ops.hpp); the kernels take the compute type.
  const Tensor w = parameter_in_compute_dtype(weight, x.dtype());
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(x.dtype(), op, [&]<typename T>() {
      kernels::cuda::rmsnorm_forward<T>(x.data<T>(), data_or_null<const T>(residual.branch),
                                        data_or_null<T>(residual.sum), w.data<float>(), y.data<T>(),
                                        rstd.data<float>(), rows_of(x), x.size(-1), eps);
    });
  }
#endif
  dispatch_floating(x.dtype(), op, [&]<typename T>() {
    using C = compute_t<T>;
    kernels::cpu::rmsnorm_forward<T>(x.data<T>(), data_or_null<const T>(residual.branch),
                                     data_or_null<T>(residual.sum), w.data<C>(), y.data<T>(), rstd.data<C>(),
                                     rows_of(x), x.size(-1), eps);
  });
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dx,
                      const Tensor& d_weight) {
  const char* op = "rmsnorm backward";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&dy, &x, &weight, &rstd, &dx, &d_weight});
  check_norm(op, x, dy, weight, {&rstd});
  // Read-only parameters may be T (ops.hpp); the kernels take the compute type.
  const Tensor w = parameter_in_compute_dtype(weight, x.dtype());
  check_norm(op, x, dx, d_weight.defined() ? d_weight : weight, {});
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(x.dtype(), op, [&]<typename T>() {
      kernels::cuda::rmsnorm_backward<T>(dy.data<T>(), x.data<T>(), w.data<float>(), rstd.data<float>(),
                                         dx.data<T>(), data_or_null<float>(d_weight), rows_of(x), x.size(-1));
    });
  }
#endif
  dispatch_floating(x.dtype(), op, [&]<typename T>() {
    using C = compute_t<T>;
    kernels::cpu::rmsnorm_backward<T>(dy.data<T>(), x.data<T>(), w.data<C>(), rstd.data<C>(), dx.data<T>(),
                                      d_weight.defined() ? d_weight.data<C>() : nullptr, rows_of(x), x.size(-1));
  });
}

void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, double eps, const ResidualAdd& residual) {
  const char* op = residual.branch.defined() ? "add + layernorm" : "layernorm";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device =
      op_device(op, {&x, &residual.branch, &residual.sum, &weight, &bias, &y, &mean, &rstd});
  check_norm(op, x, y, weight, {&mean, &rstd});
  check_residual(op, x, residual);
  // Read-only parameters may be T (ops.hpp); the kernels take the compute type.
  const Tensor w = parameter_in_compute_dtype(weight, x.dtype());
  const Tensor b = parameter_in_compute_dtype(bias, x.dtype());
  if (bias.defined()) expect_shape(op, "bias", bias, weight.shape());
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(x.dtype(), op, [&]<typename T>() {
      kernels::cuda::layernorm_forward<T>(x.data<T>(), data_or_null<const T>(residual.branch),
                                          data_or_null<T>(residual.sum), w.data<float>(),
                                          data_or_null<const float>(b), y.data<T>(), mean.data<float>(),
                                          rstd.data<float>(), rows_of(x), x.size(-1), eps);
    });
  }
#endif
  dispatch_floating(x.dtype(), op, [&]<typename T>() {
    using C = compute_t<T>;
    kernels::cpu::layernorm_forward<T>(x.data<T>(), data_or_null<const T>(residual.branch),
                                       data_or_null<T>(residual.sum), w.data<C>(), data_or_null<const C>(b),
                                       y.data<T>(), mean.data<C>(), rstd.data<C>(), rows_of(x), x.size(-1), eps);
  });
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& d_weight, const Tensor& d_bias) {
  const char* op = "layernorm backward";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&dy, &x, &weight, &mean, &rstd, &dx, &d_weight, &d_bias});
  check_norm(op, x, dy, weight, {&mean, &rstd});
  // Read-only parameters may be T (ops.hpp); the kernels take the compute type.
  const Tensor w = parameter_in_compute_dtype(weight, x.dtype());
  check_norm(op, x, dx, d_weight.defined() ? d_weight : weight, {});
  if (d_bias.defined()) expect_shape(op, "bias gradient", d_bias, weight.shape());
  HONE_CHECK(d_weight.defined() || !d_bias.defined(), "{}: a bias gradient for a frozen weight", op);
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(x.dtype(), op, [&]<typename T>() {
      kernels::cuda::layernorm_backward<T>(dy.data<T>(), x.data<T>(), w.data<float>(), mean.data<float>(),
                                           rstd.data<float>(), dx.data<T>(), data_or_null<float>(d_weight),
                                           data_or_null<float>(d_bias), rows_of(x), x.size(-1));
    });
  }
#endif
  dispatch_floating(x.dtype(), op, [&]<typename T>() {
    using C = compute_t<T>;
    kernels::cpu::layernorm_backward<T>(dy.data<T>(), x.data<T>(), w.data<C>(), mean.data<C>(), rstd.data<C>(),
                                        dx.data<T>(), d_weight.defined() ? d_weight.data<C>() : nullptr,
                                        d_bias.defined() ? d_bias.data<C>() : nullptr, rows_of(x), x.size(-1));
  });
}

}  // namespace hone::ops
