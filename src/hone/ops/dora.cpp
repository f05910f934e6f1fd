// DoRA's ops: the per-row norms of an adapted weight, and the rescaling of a
// projection's adapted columns with its backward.
#include "hone/kernels/cpu/dora.hpp"
#include "hone/ops/dispatch.hpp"
#include "hone/ops/ops.hpp"

#ifdef HONE_WITH_CUDA
#include "hone/kernels/cuda/dora.hpp"
#endif

namespace hone::ops {

using namespace detail;

namespace {

// Calls fn.template operator()<M>() for the dtype of merged weights and magnitudes: f32, or f64 on the CPU.
template <typename Fn>
void dispatch_master(const char* op, const Tensor& t, Device device, Fn&& fn) {
  if (t.dtype() == DType::f32) return fn.template operator()<float>();
  HONE_CHECK(t.dtype() == DType::f64 && !device.is_cuda(), "{}: no kernel for {} tensors on {}", op,
             dtype_name(t.dtype()), device.str());
  fn.template operator()<double>();
}

// The [rows, c] block at column col of a [rows, width] matrix y, and a per-column vector of c.
void expect_block(const char* op, const Tensor& y, int64_t col, const Tensor& block, const Tensor& per_column) {
  HONE_CHECK(y.ndim() == 2 && block.ndim() == 2 && block.size(0) == y.size(0) && col >= 0 &&
                 col + block.size(1) <= y.size(1) && block.dtype() == y.dtype(),
             "{}: a {} block at column {} of {}", op, block.shape().str(), col, y.shape().str());
  expect_shape(op, "per-column factors", per_column, {block.size(1)});
  expect_dtype(op, "per-column factors", per_column, compute_dtype(y.dtype()));
}

}  // namespace

void dora_norms(const Tensor& weight, const Tensor& a, const Tensor& b, double lora_scale, const Tensor& magnitude,
                const Tensor& scale, const Tensor& inv_norm, const Tensor& norms) {
  const char* op = "dora_norms";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device =
      norms.defined() ? op_device(op, {&weight, &a, &b, &magnitude, &scale, &inv_norm, &norms})
                      : op_device(op, {&weight, &a, &b, &magnitude, &scale, &inv_norm});
  HONE_CHECK(weight.ndim() == 2 && a.ndim() == 2 && b.ndim() == 2 && a.size(1) == weight.size(1) &&
                 b.size(0) == weight.size(0) && b.size(1) == a.size(0),
             "{}: adapter A {} and B {} do not fit the weight {}", op, a.shape().str(), b.shape().str(),
             weight.shape().str());
  const int64_t rows = weight.size(0), in = weight.size(1), rank = a.size(0);
  const DType master = compute_dtype(weight.dtype());
  expect_dtype(op, "A", a, master);
  expect_dtype(op, "B", b, master);
  for (const Tensor* t : {&magnitude, &scale, &inv_norm, &norms}) {
    if (!t->defined()) continue;  // norms, not asked for
    expect_shape(op, "per-row vector", *t, {rows});
    expect_dtype(op, "per-row vector", *t, master);
  }
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(weight.dtype(), op, [&]<typename T>() {
      kernels::cuda::dora_norms<T>(weight.data<T>(), rows, in, a.data<float>(), b.data<float>(), rank, lora_scale,
                                   magnitude.data<float>(), scale.data<float>(), inv_norm.data<float>(),
                                   norms.defined() ? norms.data<float>() : nullptr);
    });
  }
#endif
  dispatch_floating(weight.dtype(), op, [&]<typename T>() {
    using C = compute_t<T>;
    kernels::cpu::dora_norms<T>(weight.data<T>(), rows, in, a.data<C>(), b.data<C>(), rank, lora_scale,
                                magnitude.data<C>(), scale.data<C>(), inv_norm.data<C>(),
                                norms.defined() ? norms.data<C>() : nullptr);
  });
}

void scale_rows(const Tensor& x, const Tensor& factor) {
  const char* op = "scale_rows";
  const OpTimer timer(op);
  const Device device = op_device(op, {&x, &factor});
  HONE_CHECK(x.ndim() == 2, "{}: {} is not a matrix", op, x.shape().str());
  expect_shape(op, "factors", factor, {x.size(0)});
  expect_dtype(op, "factors", factor, x.dtype());
  dispatch_master(op, x, device, [&]<typename M>() {
#ifdef HONE_WITH_CUDA
    if constexpr (std::is_same_v<M, float>) {
      if (device.is_cuda()) return kernels::cuda::scale_rows(x.data<float>(), x.size(0), x.size(1), factor.data<float>());
    }
#endif
    kernels::cpu::scale_rows<M>(x.data<M>(), x.size(0), x.size(1), factor.data<M>());
  });
}

void dora_scale_forward(const Tensor& y, int64_t col, const Tensor& scale, const Tensor& bias, const Tensor& z) {
  const char* op = "dora_scale_forward";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&y, &scale, &bias, &z});
  expect_block(op, y, col, z, scale);
  const Tensor b = bias.defined() ? parameter_in_compute_dtype(bias, y.dtype()) : Tensor();
  if (b.defined()) {
    expect_shape(op, "bias", b, {y.size(1)});
    expect_dtype(op, "bias", b, compute_dtype(y.dtype()));
  }
  const int64_t rows = y.size(0), width = y.size(1), cols = z.size(1);
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(y.dtype(), op, [&]<typename T>() {
      kernels::cuda::dora_scale_forward<T>(y.data<T>(), width, col, rows, cols, scale.data<float>(),
                                           b.defined() ? b.data<float>() + col : nullptr, z.data<T>());
    });
  }
#endif
  dispatch_floating(y.dtype(), op, [&]<typename T>() {
    using C = compute_t<T>;
    kernels::cpu::dora_scale_forward<T>(y.data<T>(), width, col, rows, cols, scale.data<C>(),
                                        b.defined() ? b.data<C>() + col : nullptr, z.data<T>());
  });
}

void dora_scale_backward(const Tensor& dy, int64_t col, const Tensor& z, const Tensor& scale, const Tensor& inv_norm,
                         const Tensor& d_magnitude) {
  const char* op = "dora_scale_backward";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&dy, &z, &scale, &inv_norm, &d_magnitude});
  expect_block(op, dy, col, z, scale);
  expect_shape(op, "inverse norms", inv_norm, scale.shape());
  expect_dtype(op, "inverse norms", inv_norm, scale.dtype());
  expect_shape(op, "magnitude gradient", d_magnitude, scale.shape());
  expect_dtype(op, "magnitude gradient", d_magnitude, scale.dtype());
  const int64_t rows = dy.size(0), width = dy.size(1), cols = z.size(1);
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(dy.dtype(), op, [&]<typename T>() {
      kernels::cuda::dora_scale_backward<T>(dy.data<T>(), width, col, rows, cols, z.data<T>(), scale.data<float>(),
                                            inv_norm.data<float>(), d_magnitude.data<float>());
    });
  }
#endif
  dispatch_floating(dy.dtype(), op, [&]<typename T>() {
    using C = compute_t<T>;
    kernels::cpu::dora_scale_backward<T>(dy.data<T>(), width, col, rows, cols, z.data<T>(), scale.data<C>(),
                                         inv_norm.data<C>(), d_magnitude.data<C>());
  });
}

}  // namespace hone::ops
