#include "hone/kernels/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
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

// The scores' scale: the heads' own, else 1/sqrt(head_dim).
double scale_of(const AttentionHeads& heads) {
  return heads.scale != 0 ? heads.scale : 1.0 / std::sqrt(double(heads.head_dim));
}

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
  return {.batch = batch, .seq = seq, .n_heads = H, .n_kv_heads = KV, .head_dim = hd, .scale = scale_of(heads)};
}

template <typename T>
const compute_t<T>* slopes_or_null(const Tensor& alibi_slopes) {
  return alibi_slopes.defined() ? alibi_slopes.data<compute_t<T>>() : nullptr;
}

// The checks kv_cache_append and attention_decode share; their dims.
kernels::cpu::DecodeDims decode_dims(const char* op, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                     const DecodeRows& rows, const AttentionHeads& heads) {
  const int64_t H = heads.n_heads, KV = heads.n_kv_heads, hd = heads.head_dim;
  HONE_CHECK(KV > 0 && H % KV == 0, "{}: {} query heads cannot share {} key/value heads", op, H, KV);
  HONE_CHECK(k_cache.ndim() == 3 && k_cache.size(0) == rows.cache_slots() && k_cache.size(1) == rows.capacity() &&
                 k_cache.size(2) == KV * hd && v_cache.shape() == k_cache.shape() && k_cache.dtype() == q.dtype() &&
                 v_cache.dtype() == q.dtype(),
             "{}: caches {} and {} of {}, expected [{}, {}, {}] of {}", op, k_cache.shape().str(),
             v_cache.shape().str(), dtype_name(k_cache.dtype()), rows.cache_slots(), rows.capacity(), KV * hd,
             dtype_name(q.dtype()));
  HONE_CHECK(rows_of(q) == rows.count(), "{}: {} rows for a step of {}", op, rows_of(q), rows.count());
  HONE_CHECK(rows.device() == q.device(), "{}: the step's rows are on {}, the tensors on {}", op,
             rows.device().str(), q.device().str());
  return kernels::cpu::DecodeDims{.rows = rows.count(),
                                  .capacity = rows.capacity(),
                                  .n_heads = H,
                                  .n_kv_heads = KV,
                                  .head_dim = hd,
                                  .q_row_stride = q.size(-1),
                                  .scale = scale_of(heads)};
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

DecodeRows::DecodeRows(std::span<const int64_t> slots, std::span<const int64_t> positions, int64_t cache_slots,
                       int64_t capacity, Device device)
    : count_(int64_t(slots.size())), cache_slots_(cache_slots), capacity_(capacity) {
  HONE_CHECK(positions.size() == slots.size(), "decode: {} positions for {} slots", positions.size(), slots.size());
  HONE_CHECK(capacity <= std::numeric_limits<int32_t>::max() && cache_slots <= std::numeric_limits<int32_t>::max(),
             "decode: a cache of {}x{} positions is too large", cache_slots, capacity);
  std::vector<int32_t> positions_then_slots(2 * slots.size());
  for (int64_t i = 0; i < count_; ++i) {
    const int64_t slot = slots[size_t(i)], position = positions[size_t(i)];
    HONE_CHECK(slot >= 0 && slot < cache_slots && position >= 0 && position < capacity,
               "decode: row {} is position {} of slot {}, outside a cache of {} slots of {} positions", i, position,
               slot, cache_slots, capacity);
    positions_then_slots[size_t(i)] = int32_t(position);
    positions_then_slots[size_t(count_ + i)] = int32_t(slot);
    max_position_ = std::max(max_position_, position);
  }
  indices_ = Tensor::from(positions_then_slots, {2, count_}).to(device);
}

void kv_cache_append(const Tensor& qkv, const Tensor& cos, const Tensor& sin, const DecodeRows& rows,
                     const Tensor& k_cache, const Tensor& v_cache, const AttentionHeads& heads) {
  const char* op = "kv cache append";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&qkv, &cos, &sin, &k_cache, &v_cache});
  const kernels::cpu::DecodeDims dims = decode_dims(op, qkv, k_cache, v_cache, rows, heads);
  const int64_t H = heads.n_heads, KV = heads.n_kv_heads, hd = heads.head_dim;
  HONE_CHECK(qkv.size(-1) == (H + 2 * KV) * hd, "{}: rows of {} are no fused qkv of {} + 2·{} heads of {}", op,
             qkv.size(-1), H, KV, hd);
  if (cos.defined()) {
    HONE_CHECK(hd % 2 == 0 && cos.ndim() == 2 && cos.size(1) == hd / 2 && sin.shape() == cos.shape(),
               "{}: rotary tables {} for head_dim {}", op, cos.shape().str(), hd);
    HONE_CHECK(rows.max_position() < cos.size(0), "{}: position {} is beyond the {} rotary positions", op,
               rows.max_position(), cos.size(0));
  }
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(qkv.dtype(), op, [&]<typename T>() {
      if (cos.defined()) {
        kernels::cuda::rope_apply<T>(qkv.data<T>(), cos.data<float>(), sin.data<float>(), rows.count(), 1, H + KV, hd,
                                     qkv.size(-1), 0, false, rows.positions());
      }
      kernels::cuda::kv_cache_write<T>(qkv.data<T>(), k_cache.data<T>(), v_cache.data<T>(), rows.slots(),
                                       rows.positions(), dims);
    });
  }
#endif
  dispatch_floating(qkv.dtype(), op, [&]<typename T>() {
    using C = compute_t<T>;
    if (cos.defined()) {
      kernels::cpu::rope_apply<T>(qkv.data<T>(), cos.data<C>(), sin.data<C>(), rows.count(), 1, H + KV, hd,
                                  qkv.size(-1), 0, false, rows.positions());
    }
    kernels::cpu::kv_cache_write<T>(qkv.data<T>(), k_cache.data<T>(), v_cache.data<T>(), rows.slots(),
                                    rows.positions(), dims);
  });
}

void attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const DecodeRows& rows,
                      const Tensor& alibi_slopes, const Tensor& out, const AttentionHeads& heads) {
  const char* op = "attention decode";
  const OpTimer timer(op);
  [[maybe_unused]] const Device device = op_device(op, {&q, &k_cache, &v_cache, &alibi_slopes, &out});
  const kernels::cpu::DecodeDims dims = decode_dims(op, q, k_cache, v_cache, rows, heads);
  const int64_t H = heads.n_heads, hd = heads.head_dim;
  HONE_CHECK(q.size(-1) >= H * hd, "{}: rows of {} hold no {} query heads of {}", op, q.size(-1), H, hd);
  expect_shape(op, "output", out, {rows.count(), H * hd});
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    return dispatch_cuda(q.dtype(), op, [&]<typename T>() {
      kernels::cuda::attention_decode<T>(q.data<T>(), k_cache.data<T>(), v_cache.data<T>(), rows.slots(),
                                         rows.positions(), slopes_or_null<T>(alibi_slopes), out.data<T>(), dims);
    });
  }
#endif
  dispatch_floating(q.dtype(), op, [&]<typename T>() {
    kernels::cpu::attention_decode<T>(q.data<T>(), k_cache.data<T>(), v_cache.data<T>(), rows.slots(),
                                      rows.positions(), slopes_or_null<T>(alibi_slopes), out.data<T>(), dims);
  });
}

}  // namespace hone::ops
