#include "hone/kernels/cpu/embedding.hpp"
#include "hone/ops/dispatch.hpp"
#include "hone/ops/ops.hpp"

namespace hone::ops {

using namespace detail;

namespace {

void check_tokens(const char* op, const Tensor& tokens, int64_t vocab) {
  expect_dtype(op, "tokens", tokens, DType::i32);
  HONE_CHECK(tokens.ndim() == 2, "{}: tokens have shape {}, expected [batch, seq]", op, tokens.shape().str());
  const int32_t* ids = tokens.data<int32_t>();
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    HONE_CHECK(ids[i] >= 0 && ids[i] < vocab, "{}: token id {} at position {} is outside the vocabulary of {}", op,
               ids[i], i, vocab);
  }
}

}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& table, const Tensor& positions, const Tensor& out,
                       const Tensor& token_positions) {
  const char* op = "embedding";
  const OpTimer timer(op);
  op_device(op, {&tokens, &table, &positions, &out});
  check_tokens(op, tokens, table.size(0));
  const int64_t batch = tokens.size(0), seq = tokens.size(1), dim = table.size(1);
  expect_shape(op, "output", out, {batch, seq, dim});
  if (positions.defined()) {
    HONE_CHECK(positions.size(0) >= seq && positions.size(1) == dim,
               "{}: position table {} is too short for sequence length {}", op, positions.shape().str(), seq);
  }
  const int32_t* token_pos =
      token_positions_of(op, token_positions, batch, seq, positions.defined() ? positions.size(0) : seq);
  dispatch_floating(out.dtype(), op, [&]<typename T>() {
    expect_dtype(op, "table", table, dtype_of<compute_t<T>>());
    kernels::cpu::embedding_forward<T>(tokens.data<int32_t>(), table.data<compute_t<T>>(),
                                       positions.defined() ? positions.data<compute_t<T>>() : nullptr,
                                       out.data<T>(), batch, seq, dim, token_pos);
  });
}

void embedding_backward(const Tensor& tokens, const Tensor& d_out, const Tensor& d_table, const Tensor& d_positions,
                        const Tensor& token_positions) {
  const char* op = "embedding backward";
  const OpTimer timer(op);
  op_device(op, {&tokens, &d_out, &d_table, &d_positions});
  const int64_t batch = tokens.size(0), seq = tokens.size(1), dim = d_table.size(1);
  expect_shape(op, "output gradient", d_out, {batch, seq, dim});
  const int32_t* token_pos =
      token_positions_of(op, token_positions, batch, seq, d_positions.defined() ? d_positions.size(0) : seq);
  dispatch_floating(d_out.dtype(), op, [&]<typename T>() {
    kernels::cpu::embedding_backward<T>(tokens.data<int32_t>(), d_out.data<T>(), d_table.data<compute_t<T>>(),
                                        d_positions.defined() ? d_positions.data<compute_t<T>>() : nullptr, batch,
                                        seq, dim, token_pos);
  });
}

}  // namespace hone::ops
