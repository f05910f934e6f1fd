#include "hone/kernels/cpu/activation.hpp"

#include "hone/ops/dispatch.hpp"
#include "hone/ops/ops.hpp"

#ifdef HONE_WITH_CUDA
#include "hone/kernels/cuda/activation.hpp"
#endif

namespace hone::ops {

using namespace detail;

void swiglu_forward(const Tensor& gate_up, const Tensor& out) {
  const char* op = "swiglu";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&gate_up, &out});
  const int64_t hidden = out.size(-1), rows = rows_of(out);
  HONE_CHECK(gate_up.size(-1) == 2 * hidden && rows_of(gate_up) == rows, "{}: input {} for output {}", op,
             gate_up.shape().str(), out.shape().str());
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(out.dtype(), op, [&]<typename T>() {
      kernels::cuda::swiglu_forward<T>(gate_up.data<T>(), out.data<T>(), rows, hidden);
    });
  }
#endif
  dispatch_floating(out.dtype(), op, [&]<typename T>() {
    kernels::cpu::swiglu_forward<T>(gate_up.data<T>(), out.data<T>(), rows, hidden);
  });
}

void swiglu_backward(const Tensor& d_out, const Tensor& gate_up, const Tensor& d_gate_up) {
  const char* op = "swiglu backward";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&d_out, &gate_up, &d_gate_up});
  const int64_t hidden = d_out.size(-1), rows = rows_of(d_out);
  HONE_CHECK(gate_up.size(-1) == 2 * hidden && rows_of(gate_up) == rows && d_gate_up.shape() == gate_up.shape(),
             "{}: input {} for output gradient {}", op, gate_up.shape().str(), d_out.shape().str());
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(d_out.dtype(), op, [&]<typename T>() {
      kernels::cuda::swiglu_backward<T>(d_out.data<T>(), gate_up.data<T>(), d_gate_up.data<T>(), rows, hidden);
    });
  }
#endif
  dispatch_floating(d_out.dtype(), op, [&]<typename T>() {
    kernels::cpu::swiglu_backward<T>(d_out.data<T>(), gate_up.data<T>(), d_gate_up.data<T>(), rows, hidden);
  });
}

void gelu_forward(const Tensor& x, const Tensor& y, GeluApproximation approximation) {
  const char* op = "gelu";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&x, &y});
  expect_shape(op, "output", y, x.shape());
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(x.dtype(), op, [&]<typename T>() {
      kernels::cuda::gelu_forward<T>(x.data<T>(), y.data<T>(), x.numel(), approximation);
    });
  }
#endif
  dispatch_floating(x.dtype(), op, [&]<typename T>() {
    kernels::cpu::gelu_forward<T>(x.data<T>(), y.data<T>(), x.numel(), approximation);
  });
}

void gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& dx, GeluApproximation approximation) {
  const char* op = "gelu backward";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&dy, &x, &dx});
  expect_shape(op, "output gradient", dy, x.shape());
  expect_shape(op, "input gradient", dx, x.shape());
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(x.dtype(), op, [&]<typename T>() {
      kernels::cuda::gelu_backward<T>(dy.data<T>(), x.data<T>(), dx.data<T>(), x.numel(), approximation);
    });
  }
#endif
  dispatch_floating(x.dtype(), op, [&]<typename T>() {
    kernels::cpu::gelu_backward<T>(dy.data<T>(), x.data<T>(), dx.data<T>(), x.numel(), approximation);
  });
}

}  // namespace hone::ops
