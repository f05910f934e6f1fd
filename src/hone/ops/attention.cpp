#include "hone/kernels/cpu/attention.hpp"

#include <cmath>
#include <vector>

#include "hone/kernels/cpu/rope.hpp"
#include "hone/ops/dispatch.hpp"
#include "hone/ops/ops.hpp"

#ifdef HONE_WITH_CUDA
#include "hone/kernels/cuda/attention.hpp"
#include "hone/kernels/cuda/attention_cudnn.hpp"
#include "hone/kernels/cuda/rope.hpp"
#endif

namespace hone::ops {

using namespace detail;

namespace {

kernels::cpu::AttentionDims attention_dims(const char* op, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                           const Tensor& alibi_slopes, const AttentionHeads& heads) {
  const int64_t H = heads.n_heads, KV = heads.n_kv_heads, hd = heads.head_dim;
  HONE_CHECK(qkv.ndim() == 3 && qkv.size(2) == (H + 2 * KV) * hd,
             "{}: qkv has shape {}, expected [batch, seq, {}] for {} query and {} key/value heads of {}", op,
             qkv.shape().str(), (H + 2 * KV) * hd, H, KV, hd);
  const int64_t batch = qkv.size(0), seq = qkv.size(1);
  expect_shape(op, "output", out, {batch, seq, H * hd});
  expect_shape(op, "logsumexp", lse, {batch, H, seq});
  expect_dtype(op, "logsumexp", lse, compute_dtype(qkv.dtype()));
  if (alibi_slopes.defined()) expect_shape(op, "ALiBi slopes", alibi_slopes, {H});
  const double scale = heads.scale != 0 ? heads.scale : 1.0 / std::sqrt(double(hd));
  return {.batch = batch, .seq = seq, .n_heads = H, .n_kv_heads = KV, .head_dim = hd, .scale = scale};
}

template <typename T>
const compute_t<T>* slopes_or_null(const Tensor& alibi_slopes) {
  return alibi_slopes.defined() ? alibi_slopes.data<compute_t<T>>() : nullptr;
}

}  // namespace

size_t attention_scratch_bytes(Device device, DType dtype, const AttentionHeads& heads, int64_t batch,
                               int64_t seq) {
#ifdef HONE_WITH_CUDA
  if (device.is_cuda() && dtype == DType::bf16) {
    return kernels::cuda::cudnn_attention_scratch_bytes(
        {.batch = batch, .seq = seq, .n_heads = heads.n_heads, .n_kv_heads = heads.n_kv_heads,
         .head_dim = heads.head_dim});
  }
#endif
  (void)device, (void)dtype, (void)heads, (void)batch, (void)seq;
  return 0;
}

void attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& alibi_slopes,
                       const AttentionHeads& heads, const TokenPositions& token_positions) {
  const char* op = "attention";
  const OpTimer timer(op);
  const Device device = op_device(op, {&qkv, &out, &lse, &alibi_slopes});
  auto dims = attention_dims(op, qkv, out, lse, alibi_slopes, heads);
  const Tensor positions = token_positions_on(op, token_positions, dims.batch, dims.seq, dims.seq, device);
  dims.positions = data_or_null<const int32_t>(positions);
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(qkv.dtype(), op, [&]<typename T>() {
      kernels::cuda::attention_forward<T>(qkv.data<T>(), out.data<T>(), lse.data<float>(),
                                          slopes_or_null<T>(alibi_slopes), dims);
    });
  }
#endif
  dispatch_floating(qkv.dtype(), op, [&]<typename T>() {
    kernels::cpu::attention_forward<T>(qkv.data<T>(), out.data<T>(), lse.data<compute_t<T>>(),
                                       slopes_or_null<T>(alibi_slopes), dims);
  });
}

void attention_backward(const Tensor& d_out, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        const Tensor& alibi_slopes, const Tensor& d_qkv, const AttentionHeads& heads,
                        const TokenPositions& token_positions) {
  const char* op = "attention backward";
  const OpTimer timer(op);
  const Device device = op_device(op, {&d_out, &qkv, &out, &lse, &alibi_slopes, &d_qkv});
  auto dims = attention_dims(op, qkv, out, lse, alibi_slopes, heads);
  const Tensor positions = token_positions_on(op, token_positions, dims.batch, dims.seq, dims.seq, device);
  dims.positions = data_or_null<const int32_t>(positions);
  expect_shape(op, "output gradient", d_out, out.shape());
  expect_shape(op, "qkv gradient", d_qkv, qkv.shape());
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(qkv.dtype(), op, [&]<typename T>() {
      kernels::cuda::attention_backward<T>(d_out.data<T>(), qkv.data<T>(), out.data<T>(), lse.data<float>(),
                                           slopes_or_null<T>(alibi_slopes), d_qkv.data<T>(), dims);
    });
  }
#endif
  dispatch_floating(qkv.dtype(), op, [&]<typename T>() {
    kernels::cpu::attention_backward<T>(d_out.data<T>(), qkv.data<T>(), out.data<T>(), lse.data<compute_t<T>>(),
                                        slopes_or_null<T>(alibi_slopes), d_qkv.data<T>(), dims);
  });
}

void attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& slots,
                      const Tensor& lengths, const Tensor& alibi_slopes, const Tensor& out,
                      const AttentionHeads& heads) {
  const char* op = "attention decode";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&q, &k_cache, &v_cache, &alibi_slopes, &out});
  const int64_t H = heads.n_heads, KV = heads.n_kv_heads, hd = heads.head_dim;
  HONE_CHECK(KV > 0 && H % KV == 0, "{}: {} query heads cannot share {} key/value heads", op, H, KV);
  const int64_t rows = rows_of(q), capacity = k_cache.size(1);
  HONE_CHECK(k_cache.ndim() == 3 && k_cache.size(2) == KV * hd && v_cache.shape() == k_cache.shape(),
             "{}: caches {} and {} for {} key/value heads of {}", op, k_cache.shape().str(), v_cache.shape().str(), KV,
             hd);
  HONE_CHECK(q.size(-1) >= H * hd, "{}: rows of {} hold no {} query heads of {}", op, q.size(-1), H, hd);
  expect_shape(op, "output", out, {rows, H * hd});
  expect_shape(op, "slots", slots, {rows});
  expect_shape(op, "lengths", lengths, {rows});
  // Checked on the host (where the decoder keeps them); a device kernel reads a copy.
  const Tensor host_slots = on_device(slots, Device::cpu()), host_lengths = on_device(lengths, Device::cpu());
  const int64_t* s = host_slots.data<int64_t>();
  const int64_t* l = host_lengths.data<int64_t>();
  for (int64_t i = 0; i < rows; ++i) {
    HONE_CHECK(s[i] >= 0 && s[i] < k_cache.size(0) && l[i] >= 1 && l[i] <= capacity,
               "{}: row {} reads slot {} up to length {} of a {}x{} cache", op, i, s[i], l[i], k_cache.size(0),
               capacity);
  }
  const kernels::cpu::DecodeDims dims{.rows = rows,
                                      .capacity = capacity,
                                      .n_heads = H,
                                      .n_kv_heads = KV,
                                      .head_dim = hd,
                                      .q_row_stride = q.size(-1),
                                      .scale = heads.scale != 0 ? heads.scale : 1.0 / std::sqrt(double(hd))};
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    const Tensor device_slots = on_device(slots, device), device_lengths = on_device(lengths, device);
    return dispatch_cuda(q.dtype(), op, [&]<typename T>() {
      kernels::cuda::attention_decode<T>(q.data<T>(), k_cache.data<T>(), v_cache.data<T>(),
                                         device_slots.data<int64_t>(), device_lengths.data<int64_t>(),
                                         slopes_or_null<T>(alibi_slopes), out.data<T>(), dims);
    });
  }
#endif
  dispatch_floating(q.dtype(), op, [&]<typename T>() {
    kernels::cpu::attention_decode<T>(q.data<T>(), k_cache.data<T>(), v_cache.data<T>(), s, l,
                                      slopes_or_null<T>(alibi_slopes), out.data<T>(), dims);
  });
}

void kv_cache_append(const Tensor& qkv, const Tensor& cos, const Tensor& sin, const Tensor& slots,
                     const Tensor& positions, const Tensor& k_cache, const Tensor& v_cache,
                     const AttentionHeads& heads) {
  const char* op = "kv cache append";
  const OpTimer timer(op);
  const Device device = op_device(op, {&qkv, &cos, &sin, &k_cache, &v_cache});
  const int64_t H = heads.n_heads, KV = heads.n_kv_heads, hd = heads.head_dim;
  const int64_t rows = rows_of(qkv), capacity = k_cache.size(1);
  HONE_CHECK(KV > 0 && H % KV == 0, "{}: {} query heads cannot share {} key/value heads", op, H, KV);
  HONE_CHECK(hd > 0 && hd % 2 == 0, "{}: head_dim {} is not a positive even number", op, hd);
  HONE_CHECK(k_cache.ndim() == 3 && k_cache.size(2) == KV * hd && v_cache.shape() == k_cache.shape() &&
                 k_cache.dtype() == qkv.dtype() && v_cache.dtype() == qkv.dtype(),
             "{}: caches {} and {} for {} key/value heads of {} in {}", op, k_cache.shape().str(),
             v_cache.shape().str(), KV, hd, dtype_name(qkv.dtype()));
  HONE_CHECK(qkv.size(-1) == (H + 2 * KV) * hd, "{}: rows of {} are no fused qkv of {} + 2·{} heads of {}", op,
             qkv.size(-1), H, KV, hd);
  expect_shape(op, "slots", slots, {rows});
  expect_shape(op, "positions", positions, {rows});
  if (cos.defined()) {
    HONE_CHECK(cos.ndim() == 2 && cos.size(1) == hd / 2 && sin.shape() == cos.shape(),
               "{}: rotary tables {} for head_dim {}", op, cos.shape().str(), hd);
  }
  // Checked on the host (where the decoder keeps them), then one copy of
  // positions and slots, as i32, for a device's kernels.
  const Tensor host_slots = on_device(slots, Device::cpu()), host_positions = on_device(positions, Device::cpu());
  const int64_t* s = host_slots.data<int64_t>();
  const int64_t* p = host_positions.data<int64_t>();
  const int64_t rotary_positions = cos.defined() ? cos.size(0) : capacity;
  std::vector<int32_t> positions_then_slots(size_t(2 * rows));
  for (int64_t i = 0; i < rows; ++i) {
    HONE_CHECK(s[i] >= 0 && s[i] < k_cache.size(0) && p[i] >= 0 && p[i] < std::min(capacity, rotary_positions),
               "{}: row {} writes position {} of slot {} of a {}x{} cache{}", op, i, p[i], s[i], k_cache.size(0),
               capacity, cos.defined() ? fmt::format(" ({} rotary positions)", rotary_positions) : "");
    positions_then_slots[size_t(i)] = int32_t(p[i]);
    positions_then_slots[size_t(rows + i)] = int32_t(s[i]);
  }
  const Tensor indices = on_device(Tensor::from(positions_then_slots, {2, rows}), device);
  const int32_t* row_positions = indices.data<int32_t>();
  const int32_t* row_slots = row_positions + rows;
  const kernels::cpu::DecodeDims dims{
      .rows = rows, .capacity = capacity, .n_heads = H, .n_kv_heads = KV, .head_dim = hd, .q_row_stride = qkv.size(-1)};
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(qkv.dtype(), op, [&]<typename T>() {
      if (cos.defined()) {
        kernels::cuda::rope_apply<T>(qkv.data<T>(), cos.data<float>(), sin.data<float>(), rows, 1, H + KV, hd,
                                     qkv.size(-1), 0, false, row_positions);
      }
      kernels::cuda::kv_cache_write<T>(qkv.data<T>(), k_cache.data<T>(), v_cache.data<T>(), row_slots,
                                       row_positions, dims);
    });
  }
#endif
  dispatch_floating(qkv.dtype(), op, [&]<typename T>() {
    using C = compute_t<T>;
    if (cos.defined()) {
      kernels::cpu::rope_apply<T>(qkv.data<T>(), cos.data<C>(), sin.data<C>(), rows, 1, H + KV, hd, qkv.size(-1), 0,
                                  false, row_positions);
    }
    kernels::cpu::kv_cache_write<T>(qkv.data<T>(), k_cache.data<T>(), v_cache.data<T>(), row_slots, row_positions,
                                    dims);
  });
}

}  // namespace hone::ops
