#include "hone/kernels/cpu/embedding.hpp"
#include "hone/ops/dispatch.hpp"
#include "hone/ops/ops.hpp"

#ifdef HONE_WITH_CUDA
#include "hone/kernels/cuda/embedding.hpp"
#endif

namespace hone::ops {

using namespace detail;

namespace {

void check_token_shape(const char* op, const Tensor& tokens) {
  expect_dtype(op, "tokens", tokens, DType::i32);
  HONE_CHECK(tokens.ndim() == 2, "{}: tokens have shape {}, expected [batch, seq]", op, tokens.shape().str());
}

// A learned position table (absent: none) has a row for every position of a sequence.
void check_position_table(const char* op, const Tensor& positions, int64_t seq, int64_t dim) {
  if (!positions.defined()) return;
  HONE_CHECK(positions.ndim() == 2 && positions.size(0) >= seq && positions.size(1) == dim,
             "{}: position table {} does not fit sequence length {} and width {}", op, positions.shape().str(), seq,
             dim);
}

[[noreturn]] void fail_token(const char* op, int32_t id, int64_t index, int64_t vocab) {
  fail("{}: token id {} at position {} is outside the vocabulary of {}", op, id, index, vocab);
}

void check_tokens(const char* op, const Tensor& tokens, int64_t vocab) {
  const int32_t* ids = tokens.data<int32_t>();
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) fail_token(op, ids[i], i, vocab);
  }
}

// Calls fn.template operator()<W>() with W the element type of an embedding
// table for activations of type T: the master weights' compute_t<T>, or T itself
// (a frozen model kept in its compute dtype). Position tables match the token table.
template <typename T, typename Fn>
void dispatch_table(const char* op, const Tensor& table, const Tensor& positions, Fn&& fn) {
  if (positions.defined()) expect_dtype(op, "position table", positions, table.dtype());
  if (table.dtype() == dtype_of<T>()) return fn.template operator()<T>();
  expect_dtype(op, "table", table, dtype_of<compute_t<T>>());
  fn.template operator()<compute_t<T>>();
}

}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& table, const Tensor& positions, const Tensor& out,
                       const TokenPositions& token_positions, VocabPart part) {
  const char* op = "embedding";
  const OpTimer timer(op);
  const Device device = op_device(op, {&tokens, &table, &positions, &out});
  check_token_shape(op, tokens);
  const int64_t batch = tokens.size(0), seq = tokens.size(1), held = table.size(0), dim = table.size(1);
  part = checked_vocab_part(op, part, held);
  const int64_t vocab = part.classes;
  expect_shape(op, "output", out, {batch, seq, dim});
  check_position_table(op, positions, seq, dim);
  const Tensor token_pos =
      token_positions_on(op, token_positions, batch, seq, positions.defined() ? positions.size(0) : seq, device);
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    // The ids are checked on the device, in the lookup itself.
    return dispatch_cuda(out.dtype(), op, [&]<typename T>() {
      dispatch_table<T>(op, table, positions, [&]<typename W>() {
        const kernels::cuda::BadToken bad = kernels::cuda::embedding_forward<T, W>(
            tokens.data<int32_t>(), table.data<W>(), part.first, held, vocab, data_or_null<const W>(positions),
            out.data<T>(), batch, seq, dim, data_or_null<const int32_t>(token_pos));
        if (bad.index >= 0) fail_token(op, bad.id, bad.index, vocab);
      });
    });
  }
#endif
  check_tokens(op, tokens, vocab);
  dispatch_floating(out.dtype(), op, [&]<typename T>() {
    dispatch_table<T>(op, table, positions, [&]<typename W>() {
      kernels::cpu::embedding_forward<T, W>(tokens.data<int32_t>(), table.data<W>(), data_or_null<const W>(positions),
                                            out.data<T>(), batch, seq, dim, data_or_null<const int32_t>(token_pos),
                                            part.first, held);
    });
  });
}

void embedding_backward(const Tensor& tokens, const Tensor& d_out, const Tensor& d_table, const Tensor& d_positions,
                        const TokenPositions& token_positions, VocabPart part) {
  const char* op = "embedding backward";
  const OpTimer timer(op);
  const Device device = op_device(op, {&tokens, &d_out, &d_table, &d_positions});
  check_token_shape(op, tokens);
  const int64_t batch = tokens.size(0), seq = tokens.size(1), held = d_table.size(0), dim = d_table.size(1);
  part = checked_vocab_part(op, part, held);
  expect_shape(op, "output gradient", d_out, {batch, seq, dim});
  check_position_table(op, d_positions, seq, dim);
  const Tensor token_pos = token_positions_on(op, token_positions, batch, seq,
                                              d_positions.defined() ? d_positions.size(0) : seq, device);
#ifdef HONE_WITH_CUDA
  if (device.is_cuda()) {
    HONE_CHECK(batch * seq <= INT32_MAX, "{}: {} tokens, more than the GPU kernel's 32-bit row lists hold", op,
               batch * seq);
    return dispatch_cuda(d_out.dtype(), op, [&]<typename T>() {
      kernels::cuda::embedding_backward<T>(tokens.data<int32_t>(), d_out.data<T>(), d_table.data<float>(),
                                           part.first, held, data_or_null<float>(d_positions),
                                           d_positions.defined() ? d_positions.size(0) : 0, batch, seq, dim,
                                           data_or_null<const int32_t>(token_pos));
    });
  }
#endif
  dispatch_floating(d_out.dtype(), op, [&]<typename T>() {
    kernels::cpu::embedding_backward<T>(tokens.data<int32_t>(), d_out.data<T>(), d_table.data<compute_t<T>>(),
                                        d_positions.defined() ? d_positions.data<compute_t<T>>() : nullptr, batch,
                                        seq, dim, data_or_null<const int32_t>(token_pos), part.first, held);
  });
}

}  // namespace hone::ops
