// Causal attention in query blocks (GQA, ALiBi) against a plain softmax(QKᵀ)V that stores
// the full score matrix, and its backward against finite differences in fp64.
#include <cmath>

#include "hone/ops/ops.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

struct Case {
  int64_t batch, seq, heads, kv_heads, head_dim;
  bool alibi;
};

Tensor slopes_for(const Case& c) {
  if (!c.alibi) return Tensor();
  std::vector<double> s;
  for (int64_t h = 0; h < c.heads; ++h) s.push_back(0.5 / double(h + 1));
  return Tensor::from(s, {c.heads});
}

// out[b, i, h] = Σ_{j ≤ i} softmax_j(scale·q_i·k_j + slope_h·(j - i)) · v_j
Tensor naive_attention(const Tensor& qkv, const Case& c, const Tensor& slopes) {
  const int64_t H = c.heads, KV = c.kv_heads, hd = c.head_dim, row = (H + 2 * KV) * hd;
  auto x = qkv.to_vector<double>();
  auto sl = slopes.defined() ? slopes.to_vector<double>() : std::vector<double>(size_t(H), 0.0);
  std::vector<double> out(size_t(c.batch * c.seq * H * hd));
  const double scale = 1.0 / std::sqrt(double(hd));
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kvh = h / (H / KV);
      for (int64_t i = 0; i < c.seq; ++i) {
        std::vector<double> s(size_t(i + 1));
        double max = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          double d = 0;
          for (int64_t e = 0; e < hd; ++e)
            d += x[size_t((b * c.seq + i) * row + h * hd + e)] * x[size_t((b * c.seq + j) * row + (H + kvh) * hd + e)];
          s[size_t(j)] = scale * d + sl[size_t(h)] * double(j - i);
          max = std::max(max, s[size_t(j)]);
        }
        double sum = 0;
        for (double& v : s) sum += (v = std::exp(v - max));
        for (int64_t e = 0; e < hd; ++e) {
          double acc = 0;
          for (int64_t j = 0; j <= i; ++j)
            acc += s[size_t(j)] / sum * x[size_t((b * c.seq + j) * row + (H + KV + kvh) * hd + e)];
          out[size_t(((b * c.seq + i) * H + h) * hd + e)] = acc;
        }
      }
    }
  return Tensor::from(out, {c.batch, c.seq, H * hd});
}

ops::AttentionHeads heads_of(const Case& c) {
  return {.n_heads = c.heads, .n_kv_heads = c.kv_heads, .head_dim = c.head_dim};
}

class AttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionTest, ForwardMatchesNaiveAndBackwardMatchesFiniteDifferences) {
  const Case c = GetParam();
  const Shape qkv_shape{c.batch, c.seq, (c.heads + 2 * c.kv_heads) * c.head_dim};
  const Shape out_shape{c.batch, c.seq, c.heads * c.head_dim};
  Tensor qkv = random_tensor(qkv_shape, DType::f64, 1, 1.5);
  Tensor slopes = slopes_for(c);
  Tensor out = Tensor::empty(out_shape, DType::f64), lse = Tensor::empty({c.batch, c.heads, c.seq}, DType::f64);
  ops::attention_forward(qkv, out, lse, slopes, heads_of(c));
  Tensor expected = naive_attention(qkv, c, slopes);
  expect_close(out, expected, 1e-12, "attention forward fp64");

  Tensor probe = random_tensor(out_shape, DType::f64, 2);
  auto loss = [&] {
    ops::attention_forward(qkv, out, lse, slopes, heads_of(c));
    return dot(out, probe);
  };
  loss();
  Tensor d_qkv = Tensor::empty(qkv_shape, DType::f64);
  ops::attention_backward(probe, qkv, out, lse, slopes, d_qkv, heads_of(c));
  expect_gradient(qkv, d_qkv, loss, "attention d_qkv", 1e-6, 600);

  // fp32 and bf16 kernels against the fp64 results.
  for (auto [dtype, fwd_tol, bwd_tol] : {std::tuple{DType::f32, 1e-5, 1e-4}, std::tuple{DType::bf16, 3e-2, 5e-2}}) {
    auto lower = [&](const Tensor& t) {
      Tensor f32 = Tensor::empty(t.shape(), DType::f32);
      ops::cast(t, f32);
      if (dtype == DType::f32) return f32;
      Tensor low = Tensor::empty(t.shape(), dtype);
      ops::cast(f32, low);
      return low;
    };
    Tensor slopes32;
    if (slopes.defined()) {
      slopes32 = Tensor::empty(slopes.shape(), DType::f32);
      ops::cast(slopes, slopes32);
    }
    Tensor q = lower(qkv), o = Tensor::empty(out_shape, dtype);
    Tensor l = Tensor::empty({c.batch, c.heads, c.seq}, DType::f32);
    ops::attention_forward(q, o, l, slopes32, heads_of(c));
    expect_close(o, expected, fwd_tol, fmt::format("attention forward {}", dtype_name(dtype)));
    Tensor dq = Tensor::empty(qkv_shape, dtype);
    ops::attention_backward(lower(probe), q, o, l, slopes32, dq, heads_of(c));
    expect_close(dq, d_qkv, bwd_tol, fmt::format("attention backward {}", dtype_name(dtype)));
  }
}

// Sequences that end mid-block and span several blocks of 64 queries; MHA, GQA
// and MQA; head_dim 64, whose head vectors (128, 256 and 512 bytes in bf16, f32
// and f64) the kernel copies by constant-size memcpy.
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(Case{2, 70, 4, 2, 8, false},    // GQA, two blocks
                                           Case{1, 130, 2, 2, 16, true},   // MHA + ALiBi, three blocks
                                           Case{2, 9, 4, 1, 4, false},     // MQA, one partial block
                                           Case{1, 64, 4, 2, 8, true},     // exactly one block
                                           Case{1, 300, 6, 2, 8, true},    // GQA + ALiBi, five blocks
                                           Case{1, 70, 2, 1, 64, false},   // head_dim 64, two blocks
                                           Case{2, 56, 4, 2, 64, false}));  // 56 keys: oneDNN's bf16 bug (cpu/gemm.cpp)

// Packed samples over several query blocks: a block whose queries start in
// different samples reads keys from the earliest start and masks the rest.
// Each sample's rows (outputs and gradients) equal the sample run alone.
TEST(Attention, PackedSamplesAcrossBlocksEqualEachSampleAlone) {
  for (const bool alibi : {false, true}) {
    const Case c{1, 220, 4, 2, 8, alibi};
    const std::vector<int64_t> lengths = {30, 150, 40};  // 150 spans three blocks, boundaries mid-block
    const int64_t width = (c.heads + 2 * c.kv_heads) * c.head_dim, out_width = c.heads * c.head_dim;
    const Tensor qkv = random_tensor({1, c.seq, width}, DType::f64, 5, 1.5);
    const Tensor probe = random_tensor({1, c.seq, out_width}, DType::f64, 6);
    std::vector<int32_t> positions;
    for (int64_t n : lengths)
      for (int64_t i = 0; i < n; ++i) positions.push_back(int32_t(i));
    const Tensor packed_positions = Tensor::from(positions, {1, c.seq});
    const Tensor slopes = slopes_for(c);
    Tensor out = Tensor::empty({1, c.seq, out_width}, DType::f64), lse = Tensor::empty({1, c.heads, c.seq}, DType::f64);
    Tensor d_qkv = Tensor::empty(qkv.shape(), DType::f64);
    ops::attention_forward(qkv, out, lse, slopes, heads_of(c), packed_positions);
    ops::attention_backward(probe, qkv, out, lse, slopes, d_qkv, heads_of(c), packed_positions);

    int64_t start = 0;
    for (int64_t n : lengths) {
      const Tensor q = qkv.view({c.seq * width}).slice(start * width, {1, n, width}).clone();
      const Tensor p = probe.view({c.seq * out_width}).slice(start * out_width, {1, n, out_width}).clone();
      Tensor o = Tensor::empty({1, n, out_width}, DType::f64), l = Tensor::empty({1, c.heads, n}, DType::f64);
      Tensor dq = Tensor::empty({1, n, width}, DType::f64);
      ops::attention_forward(q, o, l, slopes, heads_of(c));
      ops::attention_backward(p, q, o, l, slopes, dq, heads_of(c));
      const std::string what = fmt::format("sample at {} ({}ALiBi)", start, alibi ? "" : "no ");
      expect_close(out.view({c.seq * out_width}).slice(start * out_width, {1, n, out_width}), o, 1e-12,
                   "packed output, " + what);
      expect_close(d_qkv.view({c.seq * width}).slice(start * width, {1, n, width}), dq, 1e-12,
                   "packed gradient, " + what);
      start += n;
    }
  }
}

// Packed positions are checked by every op that takes them (each in [0, t]),
// or once by TokenPositions::checked, whose positions the ops then take as
// they are (on a GPU that saves a read-back per op): the same results, the same
// refusals, and the ops still check their shape.
TEST(Attention, TokenPositionsAreCheckedByEachOpOrOnce) {
  const Case c{1, 6, 2, 1, 4, false};
  const int64_t width = (c.heads + 2 * c.kv_heads) * c.head_dim, out_width = c.heads * c.head_dim;
  const Tensor qkv = random_tensor({1, c.seq, width}, DType::f64, 7, 1.5);
  const auto forward = [&](const ops::TokenPositions& positions) {
    Tensor out = Tensor::empty({1, c.seq, out_width}, DType::f64), lse = Tensor::empty({1, c.heads, c.seq}, DType::f64);
    ops::attention_forward(qkv, out, lse, Tensor(), heads_of(c), positions);
    return out;
  };
  const Tensor positions = Tensor::from(std::vector<int32_t>{0, 1, 2, 0, 1, 0}, {1, c.seq});
  const ops::TokenPositions checked = ops::TokenPositions::checked(positions, Device::cpu());
  EXPECT_TRUE(checked.is_checked());
  expect_close(forward(checked), forward(positions), 0.0, "checked positions");

  for (const auto& [values, message] :
       {std::pair{std::vector<int32_t>{0, 1, 2, 0, 1, -1}, "token 5 of row 0 has position -1, expected 0 to 5"},
        std::pair{std::vector<int32_t>{0, 1, 2, 4, 1, 0}, "token 3 of row 0 has position 4, expected 0 to 3"}}) {
    const Tensor bad = Tensor::from(values, {1, c.seq});
    EXPECT_NE(error_of([&] { forward(bad); }).find(std::string("attention: ") + message), std::string::npos);
    EXPECT_NE(error_of([&] { ops::TokenPositions::checked(bad, Device::cpu()); }).find(message), std::string::npos);
  }
  const ops::TokenPositions too_short =
      ops::TokenPositions::checked(Tensor::from(std::vector<int32_t>{0, 1, 2}, {1, 3}), Device::cpu());
  EXPECT_NE(error_of([&] { forward(too_short); }).find("token positions has shape [1, 3], expected [1, 6]"),
            std::string::npos)
      << error_of([&] { forward(too_short); });
}

// Decoding's cache update against rope_apply on each row alone and plain copies:
// rows at different positions of different slots, with and without rotary tables.
TEST(Attention, KvCacheAppendRotatesEachRowAtItsPositionAndCachesItsKeysAndValues) {
  const int64_t H = 4, KV = 2, hd = 6, width = (H + 2 * KV) * hd, slots = 3, capacity = 9;
  const std::vector<int64_t> slot_of = {2, 0, 1}, position_of = {0, 8, 5};
  const int64_t rows = int64_t(slot_of.size());
  const ops::AttentionHeads heads{.n_heads = H, .n_kv_heads = KV, .head_dim = hd};
  const Tensor cos = random_tensor({capacity, hd / 2}, DType::f64, 11);
  const Tensor sin = random_tensor({capacity, hd / 2}, DType::f64, 12);
  const ops::DecodeRows step(slot_of, position_of, slots, capacity, Device::cpu());
  for (const bool rotary : {true, false}) {
    const Tensor qkv = random_tensor({rows, width}, DType::f64, 13);
    const Tensor expected_qkv = qkv.clone();
    const Tensor k_cache = random_tensor({slots, capacity, KV * hd}, DType::f64, 14), v_cache = k_cache.clone();
    const Tensor expected_k = k_cache.clone(), expected_v = v_cache.clone();
    for (int64_t i = 0; i < rows; ++i) {
      const Tensor row = expected_qkv.slice(i * width, {1, 1, width});
      if (rotary) ops::rope_apply(row, cos, sin, H + KV, hd, position_of[size_t(i)], false);
      const int64_t cached = (slot_of[size_t(i)] * capacity + position_of[size_t(i)]) * KV * hd;
      for (const auto& [cache, first] : {std::pair{expected_k, H * hd}, std::pair{expected_v, (H + KV) * hd}}) {
        cache.view({cache.numel()}).slice(cached, {KV * hd}).copy_from(row.view({width}).slice(first, {KV * hd}));
      }
    }
    ops::kv_cache_append(qkv, rotary ? cos : Tensor(), rotary ? sin : Tensor(), step, k_cache, v_cache, heads);
    const std::string what = rotary ? " (rotary)" : "";
    expect_close(qkv, expected_qkv, 1e-15, "rotated qkv" + what);
    expect_close(k_cache, expected_k, 0, "key cache" + what);
    expect_close(v_cache, expected_v, 0, "value cache" + what);
  }
  // A position past the cache names the row; one past the rotary tables, the position.
  const std::vector<int64_t> past = {0, 9, 5};
  EXPECT_NE(error_of([&] { ops::DecodeRows(slot_of, past, slots, capacity, Device::cpu()); })
                .find("row 1 is position 9 of slot 0, outside a cache of 3 slots of 9 positions"),
            std::string::npos);
  const Tensor qkv = random_tensor({rows, width}, DType::f64, 15);
  const Tensor k_cache = Tensor::zeros({slots, capacity, KV * hd}, DType::f64), v_cache = k_cache.clone();
  const Tensor short_tables = cos.slice(0, {5, hd / 2});
  const auto append_with_short_tables = [&] {
    ops::kv_cache_append(qkv, short_tables, short_tables, step, k_cache, v_cache, heads);
  };
  EXPECT_NE(error_of(append_with_short_tables).find("position 8 is beyond the 5 rotary positions"), std::string::npos);
  // Caches of another shape than the step's are refused.
  const Tensor small_cache = Tensor::zeros({slots, capacity - 1, KV * hd}, DType::f64);
  EXPECT_NE(error_of([&] { ops::kv_cache_append(qkv, cos, sin, step, small_cache, small_cache, heads); })
                .find("expected [3, 9, 12]"),
            std::string::npos);
}

TEST(Attention, RejectsHeadsThatDoNotGroup) {
  Tensor qkv = Tensor::zeros({1, 4, (3 + 4) * 4}, DType::f32);
  Tensor out = Tensor::zeros({1, 4, 3 * 4}, DType::f32), lse = Tensor::zeros({1, 3, 4}, DType::f32);
  EXPECT_THROW(ops::attention_forward(qkv, out, lse, Tensor(), {.n_heads = 3, .n_kv_heads = 2, .head_dim = 4}),
               Error);
}

}  // namespace
}  // namespace hone::test
