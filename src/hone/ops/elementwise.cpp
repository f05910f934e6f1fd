#include "hone/kernels/cpu/adamw.hpp"
#include "hone/kernels/cpu/elementwise.hpp"
#include "hone/ops/dispatch.hpp"
#include "hone/ops/ops.hpp"

namespace hone::ops {

using namespace detail;

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  const char* op = "add";
  op_device(op, {&a, &b, &out});
  expect_shape(op, "second operand", b, a.shape());
  expect_shape(op, "output", out, a.shape());
  dispatch_floating(a.dtype(), op, [&]<typename T>() {
    kernels::cpu::add<T>(a.data<T>(), b.data<T>(), out.data<T>(), a.numel());
  });
}

void add_(const Tensor& x, const Tensor& y) { add(x, y, x); }

void scale_(const Tensor& x, double factor) {
  op_device("scale", {&x});
  dispatch_floating(x.dtype(), "scale", [&]<typename T>() {
    kernels::cpu::scale_inplace<T>(x.data<T>(), x.numel(), factor);
  });
}

void cast(const Tensor& src, const Tensor& dst) {
  const char* op = "cast";
  op_device(op, {&src, &dst});
  expect_shape(op, "destination", dst, src.shape());
  const DType from = src.dtype(), to = dst.dtype();
  const int64_t n = src.numel();
  if (from == to) {
    dst.copy_from(src);
  } else if (from == DType::f32 && to == DType::bf16) {
    kernels::cpu::cast(src.data<float>(), dst.data<bf16>(), n);
  } else if (from == DType::bf16 && to == DType::f32) {
    kernels::cpu::cast(src.data<bf16>(), dst.data<float>(), n);
  } else if (from == DType::f32 && to == DType::f64) {
    kernels::cpu::cast(src.data<float>(), dst.data<double>(), n);
  } else if (from == DType::f64 && to == DType::f32) {
    kernels::cpu::cast(src.data<double>(), dst.data<float>(), n);
  } else {
    fail("{}: no conversion from {} to {}", op, dtype_name(from), dtype_name(to));
  }
}

double sum_squares(const Tensor& x) {
  op_device("sum_squares", {&x});
  double result = 0;
  dispatch_floating(x.dtype(), "sum_squares", [&]<typename T>() {
    result = kernels::cpu::sum_squares<T>(x.data<T>(), x.numel());
  });
  return result;
}

void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWHyper& hyper, const Tensor& compute_copy) {
  const char* op = "adamw";
  op_device(op, {&param, &grad, &m, &v, &compute_copy});
  for (const Tensor* t : {&grad, &m, &v}) {
    HONE_CHECK(t->numel() == param.numel() && t->dtype() == param.dtype(), "{}: state of {} {} for {} {} parameters",
               op, t->numel(), dtype_name(t->dtype()), param.numel(), dtype_name(param.dtype()));
  }
  bf16* copy = nullptr;
  if (compute_copy.defined()) {
    expect_dtype(op, "compute copy", compute_copy, DType::bf16);
    HONE_CHECK(compute_copy.numel() == param.numel(), "{}: compute copy of {} for {} parameters", op,
               compute_copy.numel(), param.numel());
    copy = compute_copy.data<bf16>();
  }
  switch (param.dtype()) {
    case DType::f32:
      kernels::cpu::adamw_update<float>(param.data<float>(), grad.data<float>(), m.data<float>(), v.data<float>(),
                                        param.numel(), hyper, copy);
      break;
    case DType::f64:
      kernels::cpu::adamw_update<double>(param.data<double>(), grad.data<double>(), m.data<double>(),
                                         v.data<double>(), param.numel(), hyper, copy);
      break;
    default: fail("{}: master weights must be fp32 or fp64, not {}", op, dtype_name(param.dtype()));
  }
}

}  // namespace hone::ops
