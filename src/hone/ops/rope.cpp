#include "hone/kernels/cpu/rope.hpp"

#include "hone/ops/dispatch.hpp"
#include "hone/ops/ops.hpp"

#ifdef HONE_WITH_CUDA
#include "hone/kernels/cuda/rope.hpp"
#endif

namespace hone::ops {

using namespace detail;

void rope_apply(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t heads, int64_t head_dim,
                int64_t position_offset, bool inverse, const TokenPositions& token_positions) {
  const char* op = "rope";
  const OpTimer timer(op);
  const Device device = op_device(op, {&x, &cos, &sin});
  HONE_CHECK(x.ndim() == 3 && heads * head_dim <= x.size(2) && head_dim % 2 == 0,
             "{}: cannot rotate {} heads of {} dimensions in rows of {}", op, heads, head_dim, x.shape().str());
  const int64_t seq = x.size(1);
  HONE_CHECK(cos.ndim() == 2 && cos.size(1) == head_dim / 2 && cos.size(0) >= position_offset + seq &&
                 sin.shape() == cos.shape(),
             "{}: tables {} do not cover positions up to {} for head_dim {}", op, cos.shape().str(),
             position_offset + seq, head_dim);
  const Tensor token_pos = token_positions_on(op, token_positions, x.size(0), seq, cos.size(0), device);
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(x.dtype(), op, [&]<typename T>() {
      kernels::cuda::rope_apply<T>(x.data<T>(), cos.data<float>(), sin.data<float>(), x.size(0), seq, heads,
                                   head_dim, x.size(2), position_offset, inverse,
                                   data_or_null<const int32_t>(token_pos));
    });
  }
#endif
  dispatch_floating(x.dtype(), op, [&]<typename T>() {
    using C = compute_t<T>;
    kernels::cpu::rope_apply<T>(x.data<T>(), cos.data<C>(), sin.data<C>(), x.size(0), seq, heads, head_dim,
                                x.size(2), position_offset, inverse, data_or_null<const int32_t>(token_pos));
  });
}

}  // namespace hone::ops
