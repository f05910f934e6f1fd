#include <cstring>

#include "hone/kernels/cpu/adamw.hpp"
#include "hone/kernels/cpu/elementwise.hpp"
#include "hone/ops/dispatch.hpp"
#include "hone/ops/ops.hpp"

#ifdef HONE_WITH_CUDA
#include "hone/kernels/cuda/adamw.hpp"
#include "hone/kernels/cuda/elementwise.hpp"
#include "hone/kernels/cuda/runtime.hpp"
#endif

namespace hone::ops {

using namespace detail;

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  const char* op = "add";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&a, &b, &out});
  expect_shape(op, "second operand", b, a.shape());
  expect_shape(op, "output", out, a.shape());
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(a.dtype(), op, [&]<typename T>() {
      kernels::cuda::add<T>(a.data<T>(), b.data<T>(), out.data<T>(), a.numel());
    });
  }
#endif
  dispatch_floating(a.dtype(), op, [&]<typename T>() {
    kernels::cpu::add<T>(a.data<T>(), b.data<T>(), out.data<T>(), a.numel());
  });
}

void add_(const Tensor& x, const Tensor& y) { add(x, y, x); }

void scale_(const Tensor& x, double factor) {
  const char* op = "scale";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&x});
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(x.dtype(), op, [&]<typename T>() {
      kernels::cuda::scale_inplace<T>(x.data<T>(), x.numel(), factor);
    });
  }
#endif
  dispatch_floating(x.dtype(), op, [&]<typename T>() {
    kernels::cpu::scale_inplace<T>(x.data<T>(), x.numel(), factor);
  });
}

void cast(const Tensor& src, const Tensor& dst) {
  const OpTimer timer("cast");
  [[maybe_unused]] const Device device = op_device("cast", {&src, &dst});
  expect_shape("cast", "destination", dst, src.shape());
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) return kernels::cuda::cast(src.raw(), src.dtype(), dst.raw(), dst.dtype(), dst.numel());
#endif
  if (src.dtype() == dst.dtype()) {
    dst.copy_from(src);
  } else {
    cast(src.raw(), src.dtype(), dst);
  }
}

Tensor cast_to(const Tensor& src, DType dtype) {
  if (src.dtype() == dtype) return src;
  Tensor converted = Tensor::empty(src.shape(), dtype, src.device());
  cast(src, converted);
  return converted;
}

void cast(const void* src, DType src_dtype, const Tensor& dst) {
  const char* op = "cast";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&dst});
  const DType from = src_dtype, to = dst.dtype();
  const int64_t n = dst.numel();
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    // The host values go over as they are; the GPU converts them.
    if (from == to) return allocator_for(device).copy_from_host(dst.raw(), src, dst.nbytes());
    const Tensor staged = Tensor::empty(dst.shape(), from, device);
    allocator_for(device).copy_from_host(staged.raw(), src, staged.nbytes());
    return kernels::cuda::cast(staged.raw(), from, dst.raw(), to, n);
  }
#endif
  namespace k = kernels::cpu;
  if (from == to) {
    if (n > 0) std::memcpy(dst.raw(), src, dst.nbytes());
  } else if (from == DType::f32 && to == DType::bf16) {
    k::cast(static_cast<const float*>(src), dst.data<bf16>(), n);
  } else if (from == DType::bf16 && to == DType::f32) {
    k::cast(static_cast<const bf16*>(src), dst.data<float>(), n);
  } else if (from == DType::f32 && to == DType::f16) {
    k::cast_f32_to_f16(static_cast<const float*>(src), static_cast<uint16_t*>(dst.raw()), n);
  } else if (from == DType::f16 && to == DType::f32) {
    k::cast_f16_to_f32(static_cast<const uint16_t*>(src), dst.data<float>(), n);
  } else if (from == DType::f32 && to == DType::f64) {
    k::cast(static_cast<const float*>(src), dst.data<double>(), n);
  } else if (from == DType::f64 && to == DType::f32) {
    k::cast(static_cast<const double*>(src), dst.data<float>(), n);
  } else {
    fail("{}: no conversion from {} to {}", op, dtype_name(from), dtype_name(to));
  }
}

void dropout(const Tensor& x, const Tensor& out, double p, uint64_t seed, uint64_t stream, int64_t first) {
  const char* op = "dropout";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&x, &out});
  expect_shape(op, "output", out, x.shape());
  HONE_CHECK(p >= 0 && p < 1, "{}: probability {} is not in [0, 1)", op, p);
  HONE_CHECK(first >= 0, "{}: first element {} is negative", op, first);
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(x.dtype(), op, [&]<typename T>() {
      kernels::cuda::dropout<T>(x.data<T>(), out.data<T>(), x.numel(), p, seed, stream, first);
    });
  }
#endif
  dispatch_floating(x.dtype(), op, [&]<typename T>() {
    kernels::cpu::dropout<T>(x.data<T>(), out.data<T>(), x.numel(), p, seed, stream, first);
  });
}

void add_columns(const Tensor& dst, int64_t col, const Tensor& src, double scale) {
  const char* op = "add_columns";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&dst, &src});
  HONE_CHECK(dst.ndim() == 2 && src.ndim() == 2 && src.size(0) == dst.size(0) && col >= 0 &&
                 col + src.size(1) <= dst.size(1) && src.dtype() == dst.dtype(),
             "{}: a {} block at column {} of {}", op, src.shape().str(), col, dst.shape().str());
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(dst.dtype(), op, [&]<typename T>() {
      kernels::cuda::add_scaled_columns<T>(dst.data<T>(), dst.size(1), col, src.data<T>(), src.size(0), src.size(1),
                                           scale);
    });
  }
#endif
  dispatch_floating(dst.dtype(), op, [&]<typename T>() {
    kernels::cpu::add_scaled_columns<T>(dst.data<T>(), dst.size(1), col, src.data<T>(), src.size(0), src.size(1),
                                        scale);
  });
}

void copy_columns(const Tensor& src, int64_t col, const Tensor& dst, double scale) {
  const char* op = "copy_columns";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&dst, &src});
  HONE_CHECK(dst.ndim() == 2 && src.ndim() == 2 && src.size(0) == dst.size(0) && col >= 0 &&
                 col + dst.size(1) <= src.size(1) && src.dtype() == dst.dtype(),
             "{}: a {} block at column {} of {}", op, dst.shape().str(), col, src.shape().str());
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(dst.dtype(), op, [&]<typename T>() {
      kernels::cuda::copy_scaled_columns<T>(src.data<T>(), src.size(1), col, dst.data<T>(), dst.size(0),
                                            dst.size(1), scale);
    });
  }
#endif
  dispatch_floating(dst.dtype(), op, [&]<typename T>() {
    kernels::cpu::copy_scaled_columns<T>(src.data<T>(), src.size(1), col, dst.data<T>(), dst.size(0), dst.size(1),
                                         scale);
  });
}

double sum_squares(const Tensor& x) {
  const char* op = "sum_squares";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&x});
  double result = 0;
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    dispatch_cuda(x.dtype(), op, [&]<typename T>() { result = kernels::cuda::sum_squares<T>(x.data<T>(), x.numel()); });
    return result;
  }
#endif
  dispatch_floating(x.dtype(), op, [&]<typename T>() {
    result = kernels::cpu::sum_squares<T>(x.data<T>(), x.numel());
  });
  return result;
}

void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWHyper& hyper, const Tensor& compute_copy) {
  const char* op = "adamw";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&param, &grad, &m, &v, &compute_copy});
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
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    HONE_CHECK(param.dtype() == DType::f32, "{}: master weights on CUDA are fp32, not {}", op,
               dtype_name(param.dtype()));
    return kernels::cuda::adamw_update(param.data<float>(), grad.data<float>(), m.data<float>(), v.data<float>(),
                                       param.numel(), hyper, copy);
  }
#endif
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

void synchronize(Device device) {
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) kernels::cuda::synchronize();
#endif
}

void use_device(Device device) {
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) kernels::cuda::set_device(device.index);
#endif
}

}  // namespace hone::ops
