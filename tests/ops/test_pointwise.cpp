// Embedding, RoPE, SwiGLU, GELU (exact and tanh), residual add, dropout and
// DoRA's rescaling: forward against their formulas, backward against finite
// differences in fp64; overlapped copies on the CPU.
#include <cmath>

#include "hone/ops/ops.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

TEST(Embedding, ForwardGathersAndBackwardScatters) {
  const int64_t vocab = 11, dim = 5, batch = 2, seq = 4;
  Tensor table = random_tensor({vocab, dim}, DType::f64, 1), positions = random_tensor({6, dim}, DType::f64, 2);
  std::vector<int32_t> ids = {3, 7, 3, 0, 10, 3, 5, 7};  // repeated ids must accumulate
  Tensor tokens = Tensor::from(ids, {batch, seq});
  Tensor out = Tensor::empty({batch, seq, dim}, DType::f64);
  ops::embedding_forward(tokens, table, positions, out);
  auto T = table.to_vector<double>(), P = positions.to_vector<double>(), O = out.to_vector<double>();
  for (int64_t r = 0; r < batch * seq; ++r)
    for (int64_t j = 0; j < dim; ++j)
      EXPECT_EQ(O[size_t(r * dim + j)], T[size_t(ids[size_t(r)] * dim + j)] + P[size_t((r % seq) * dim + j)]);

  Tensor probe = random_tensor(out.shape(), DType::f64, 3);
  auto loss = [&] {
    ops::embedding_forward(tokens, table, positions, out);
    return dot(out, probe);
  };
  Tensor d_table = Tensor::zeros(table.shape(), DType::f64), d_pos = Tensor::zeros(positions.shape(), DType::f64);
  ops::embedding_backward(tokens, probe, d_table, d_pos);
  expect_gradient(table, d_table, loss, "embedding dtable");
  expect_gradient(positions, d_pos, loss, "embedding dpositions");
}

// Tensor parallelism's split vocabulary: a part of the table looks up the ids
// it holds (zeros for the others, positions added all the same) and adds to
// their rows only: the parts' outputs sum to the whole lookup, and each part's
// gradient is the whole gradient's rows.
TEST(Embedding, PartsOfTheTableAddUpToTheWhole) {
  const int64_t vocab = 11, dim = 3, batch = 2, seq = 4;
  const Tensor table = random_tensor({vocab, dim}, DType::f64, 1), positions = random_tensor({seq, dim}, DType::f64, 2);
  const Tensor tokens = Tensor::from(std::vector<int32_t>{3, 7, 3, 0, 10, 3, 5, 7}, {batch, seq});
  const Tensor whole = Tensor::empty({batch, seq, dim}, DType::f64);
  ops::embedding_forward(tokens, table, positions, whole);
  const Tensor probe = random_tensor(whole.shape(), DType::f64, 3);
  const Tensor d_whole = Tensor::zeros(table.shape(), DType::f64);
  ops::embedding_backward(tokens, probe, d_whole, Tensor());

  Tensor sum = Tensor::zeros(whole.shape(), DType::f64);
  for (const auto& [first, rows] : {std::pair<int64_t, int64_t>{0, 4}, {4, 7}}) {
    const Tensor part = table.slice(first * dim, {rows, dim}).clone();
    const ops::VocabPart vocab_part{.first = first, .classes = vocab};
    const Tensor out = Tensor::empty(whole.shape(), DType::f64);
    ops::embedding_forward(tokens, part, first == 0 ? positions : Tensor(), out, Tensor(), vocab_part);  // positions once
    ops::add(sum, out, sum);
    const Tensor d_part = Tensor::zeros(part.shape(), DType::f64);
    ops::embedding_backward(tokens, probe, d_part, Tensor(), Tensor(), vocab_part);
    EXPECT_EQ(d_part.to_vector<double>(), d_whole.slice(first * dim, {rows, dim}).to_vector<double>());
  }
  EXPECT_EQ(sum.to_vector<double>(), whole.to_vector<double>());
  // Ids are checked against the whole vocabulary.
  const Tensor out = Tensor::empty({1, 2, dim}, DType::f64);
  EXPECT_THROW(ops::embedding_forward(Tensor::from(std::vector<int32_t>{3, 11}, {1, 2}), table.slice(0, {4, dim}),
                                      Tensor(), out, Tensor(), {.first = 0, .classes = vocab}),
               Error);
}

TEST(Embedding, BackwardRejectsTokensAndPositionTablesOfTheWrongShape) {
  const Tensor tokens = Tensor::from(std::vector<int32_t>{1, 2, 3, 0}, {2, 2});
  const Tensor d_out = Tensor::zeros({2, 2, 3}, DType::f32), d_table = Tensor::zeros({4, 3}, DType::f32);
  std::string error = error_of([&] {
    ops::embedding_backward(tokens.view({4}), d_out, d_table, Tensor());
  });
  EXPECT_NE(error.find("tokens have shape [4], expected [batch, seq]"), std::string::npos) << error;
  // The kernels write rows of the table's width at every position of a sequence.
  for (const Shape& bad : {Shape{2, 2}, Shape{1, 3}}) {
    error = error_of([&] { ops::embedding_backward(tokens, d_out, d_table, Tensor::zeros(bad, DType::f32)); });
    EXPECT_NE(error.find("position table " + bad.str() + " does not fit sequence length 2 and width 3"),
              std::string::npos)
        << error;
  }
}

TEST(Embedding, RejectsTokenOutsideVocabulary) {
  Tensor table = Tensor::zeros({4, 2}, DType::f32), out = Tensor::zeros({1, 2, 2}, DType::f32);
  Tensor tokens = Tensor::from(std::vector<int32_t>{1, 4}, {1, 2});
  try {
    ops::embedding_forward(tokens, table, Tensor(), out);
    FAIL() << "no error for token id 4 in a vocabulary of 4";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 4 at position 1"), std::string::npos) << e.what();
  }
}

TEST(Rope, RotatesHalvesByPositionAndInverseIsTheBackward) {
  const int64_t batch = 2, seq = 5, heads = 3, hd = 6, row = 4 * hd;  // 3 rotated heads + 1 untouched (a "v" head)
  const int64_t half = hd / 2, offset = 2;
  Tensor cos = random_tensor({offset + seq, half}, DType::f64, 1), sin = random_tensor({offset + seq, half}, DType::f64, 2);
  Tensor x = random_tensor({batch, seq, row}, DType::f64, 3);
  Tensor y = x.clone();
  ops::rope_apply(y, cos, sin, heads, hd, offset, false);
  auto X = x.to_vector<double>(), Y = y.to_vector<double>(), C = cos.to_vector<double>(), S = sin.to_vector<double>();
  for (int64_t r = 0; r < batch * seq; ++r) {
    const int64_t pos = offset + r % seq;
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const size_t a = size_t(r * row + h * hd + i), b = a + size_t(half);
        const double c = C[size_t(pos * half + i)], s = S[size_t(pos * half + i)];
        if (h < heads) {  // HF rotate_half: [x1, x2] -> [x1·c - x2·s, x2·c + x1·s]
          EXPECT_NEAR(Y[a], X[a] * c - X[b] * s, 1e-15);
          EXPECT_NEAR(Y[b], X[b] * c + X[a] * s, 1e-15);
        } else {
          EXPECT_EQ(Y[a], X[a]);
          EXPECT_EQ(Y[b], X[b]);
        }
      }
  }
  Tensor probe = random_tensor(x.shape(), DType::f64, 4);
  auto loss = [&] {
    y.copy_from(x);
    ops::rope_apply(y, cos, sin, heads, hd, offset, false);
    return dot(y, probe);
  };
  Tensor dx = probe.clone();
  ops::rope_apply(dx, cos, sin, heads, hd, offset, true);
  expect_gradient(x, dx, loss, "rope dx");
}

TEST(SwiGlu, ForwardAndBackward) {
  const int64_t rows = 7, hidden = 9;
  Tensor gate_up = random_tensor({rows, 2 * hidden}, DType::f64, 1, 3.0);
  Tensor out = Tensor::empty({rows, hidden}, DType::f64);
  ops::swiglu_forward(gate_up, out);
  auto G = gate_up.to_vector<double>(), O = out.to_vector<double>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < hidden; ++j) {
      const double g = G[size_t(r * 2 * hidden + j)], u = G[size_t(r * 2 * hidden + hidden + j)];
      EXPECT_NEAR(O[size_t(r * hidden + j)], g / (1 + std::exp(-g)) * u, 1e-14);
    }
  Tensor probe = random_tensor(out.shape(), DType::f64, 2);
  auto loss = [&] {
    ops::swiglu_forward(gate_up, out);
    return dot(out, probe);
  };
  Tensor d = Tensor::empty(gate_up.shape(), DType::f64);
  ops::swiglu_backward(probe, gate_up, d);
  expect_gradient(gate_up, d, loss, "swiglu");
  // In place (the model writes the gradient over its input), in every dtype's
  // kernel (bf16 and fp32 vectorize differently).
  for (const DType dtype : {DType::f64, DType::f32, DType::bf16}) {
    const Tensor input = random_tensor(gate_up.shape(), dtype, 3, 3.0), d_out = random_tensor(probe.shape(), dtype, 4);
    const Tensor apart = Tensor::empty(input.shape(), dtype), in_place = input.clone();
    ops::swiglu_backward(d_out, input, apart);
    ops::swiglu_backward(d_out, in_place, in_place);
    EXPECT_EQ(in_place.to_vector<double>(), apart.to_vector<double>()) << dtype_name(dtype);
  }
}

TEST(Gelu, ExactAndTanhForwardAndBackward) {
  for (auto kind : {ops::GeluApproximation::none, ops::GeluApproximation::tanh}) {
    Tensor x = random_tensor({50}, DType::f64, 1, 4.0), y = Tensor::empty({50}, DType::f64);
    ops::gelu_forward(x, y, kind);
    auto X = x.to_vector<double>(), Y = y.to_vector<double>();
    for (size_t i = 0; i < X.size(); ++i) {
      const double v = X[i];
      const double expected = kind == ops::GeluApproximation::none
                                  ? 0.5 * v * std::erfc(-v / std::sqrt(2.0))
                                  : 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      EXPECT_NEAR(Y[i], expected, 1e-14);
    }
    Tensor probe = random_tensor({50}, DType::f64, 2);
    auto loss = [&] {
      ops::gelu_forward(x, y, kind);
      return dot(y, probe);
    };
    Tensor dx = Tensor::empty({50}, DType::f64);
    ops::gelu_backward(probe, x, dx, kind);
    expect_gradient(x, dx, loss, kind == ops::GeluApproximation::none ? "gelu" : "gelu tanh");
    const Tensor in_place = x.clone();
    ops::gelu_backward(probe, in_place, in_place, kind);
    EXPECT_EQ(in_place.to_vector<double>(), dx.to_vector<double>()) << "in place";
  }
}

TEST(Add, SumsAndItsGradientPassesThrough) {
  Tensor a = random_tensor({3, 4}, DType::f64, 1), b = random_tensor({3, 4}, DType::f64, 2);
  Tensor out = Tensor::empty({3, 4}, DType::f64);
  ops::add(a, b, out);
  auto A = a.to_vector<double>(), B = b.to_vector<double>(), O = out.to_vector<double>();
  for (size_t i = 0; i < O.size(); ++i) EXPECT_EQ(O[i], A[i] + B[i]);
  // d(a + b)/da = d(a + b)/db = identity: the probe itself is the gradient.
  Tensor probe = random_tensor({3, 4}, DType::f64, 3);
  auto loss = [&] {
    ops::add(a, b, out);
    return dot(out, probe);
  };
  expect_gradient(a, probe, loss, "add da");
  expect_gradient(b, probe, loss, "add db");
}

TEST(Dropout, KeepsOrZeroesAndAPartGetsItsPartOfTheWholeMask) {
  const int64_t n = 1001;
  const double p = 0.3;
  const Tensor x = random_tensor({n}, DType::f64, 4), whole = Tensor::empty({n}, DType::f64);
  ops::dropout(x, whole, p, 7, 9);
  const std::vector<double> in = x.to_vector<double>(), out = whole.to_vector<double>();
  int64_t kept = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] != 0) {
      EXPECT_DOUBLE_EQ(out[i], in[i] / (1 - p)) << i;
      ++kept;
    }
  }
  EXPECT_NEAR(double(kept) / double(n), 1 - p, 0.05);
  // Parts starting inside a Philox block of 4 and at its edges.
  for (const int64_t first : {0, 1, 3, 4, 5, 998}) {
    const int64_t count = std::min<int64_t>(n - first, 37);
    const Tensor part = Tensor::empty({count}, DType::f64);
    ops::dropout(x.slice(first, {count}), part, p, 7, 9, first);
    EXPECT_EQ(part.to_vector<double>(), whole.slice(first, {count}).to_vector<double>()) << "first " << first;
  }
}

TEST(Dora, NormsRescalingAndItsBackward) {
  // ‖W + s·B·A‖ per row, from W (f64 here; bf16 below), A [3, 9] and B [5, 3].
  const Tensor w = random_tensor({5, 9}, DType::f64, 60), lora_a = random_tensor({3, 9}, DType::f64, 65),
               lora_b = random_tensor({5, 3}, DType::f64, 66);
  Tensor magnitude = random_tensor({5}, DType::f64, 61);
  for (int64_t i = 0; i < 5; ++i) magnitude.data<double>()[i] += 2.0;  // positive, as norms
  const Tensor scale = Tensor::empty({5}, DType::f64), inv_norm = Tensor::empty({5}, DType::f64);
  ops::dora_norms(w, lora_a, lora_b, 1.5, magnitude, scale, inv_norm);
  const Tensor merged = w.clone();
  for (int64_t i = 0; i < 5; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < 9; ++j) {
      double& m = merged.data<double>()[i * 9 + j];
      for (int64_t r = 0; r < 3; ++r) m += 1.5 * lora_b.data<double>()[i * 3 + r] * lora_a.data<double>()[r * 9 + j];
      sum += m * m;
    }
    EXPECT_NEAR(inv_norm.data<double>()[i], 1 / std::sqrt(sum), 1e-15);
    EXPECT_NEAR(scale.data<double>()[i], magnitude.data<double>()[i] / std::sqrt(sum), 1e-14);
  }
  // A bf16 weight with f32 adapters: the sums in f32 and double, to f32 precision.
  const Tensor w16 = ops::cast_to(ops::cast_to(w, DType::f32), DType::bf16), w16_wide = ops::cast_to(ops::cast_to(w16, DType::f32), DType::f64);
  const Tensor scale16 = Tensor::empty({5}, DType::f32), inv16 = Tensor::empty({5}, DType::f32);
  ops::dora_norms(w16, ops::cast_to(lora_a, DType::f32), ops::cast_to(lora_b, DType::f32), 1.5,
                  ops::cast_to(magnitude, DType::f32), scale16, inv16);
  ops::dora_norms(w16_wide, lora_a, lora_b, 1.5, magnitude, scale, inv_norm);
  expect_close(ops::cast_to(inv16, DType::f64), inv_norm, 1e-6, "bf16 weight's inverse norms");
  // Magnitudes set to the norms it gives (DoRA's start) scale by exactly 1, in f32 as in f64.
  for (const DType dtype : {DType::f64, DType::f32}) {
    const Tensor wt = ops::cast_to(w, dtype), at = ops::cast_to(lora_a, dtype), bt = ops::cast_to(lora_b, dtype);
    const Tensor norms = Tensor::empty({5}, dtype), ones = Tensor::empty({5}, dtype), inv = Tensor::empty({5}, dtype);
    ops::dora_norms(wt, at, bt, 1.5, ops::cast_to(magnitude, dtype), ones, inv, norms);
    ops::dora_norms(wt, at, bt, 1.5, norms, ones, inv);
    EXPECT_EQ(ops::cast_to(ones, DType::f64).to_vector<double>(), std::vector<double>(5, 1.0)) << dtype_name(dtype);
  }
  ops::dora_norms(w, lora_a, lora_b, 1.5, magnitude, scale, inv_norm);
  const Tensor rows = merged.clone();
  ops::scale_rows(rows, scale);
  for (int64_t i = 0; i < 45; ++i) EXPECT_EQ(rows.data<double>()[i], merged.data<double>()[i] * scale.data<double>()[i / 9]);

  // A block of 5 columns at column 4 of a [6, 13] output, with a bias and without.
  const Tensor y0 = random_tensor({6, 13}, DType::f64, 62), bias = random_tensor({13}, DType::f64, 63);
  for (const bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "bias" : "no bias");
    const Tensor b = with_bias ? bias : Tensor();
    const Tensor y = y0.clone(), z = Tensor::empty({6, 5}, DType::f64);
    ops::dora_scale_forward(y, 4, scale, b, z);
    for (int64_t r = 0; r < 6; ++r) {
      for (int64_t j = 0; j < 13; ++j) {
        const double before = y0.data<double>()[r * 13 + j], after = y.data<double>()[r * 13 + j];
        if (j < 4 || j >= 9) {
          EXPECT_EQ(after, before);
          continue;
        }
        const double bj = with_bias ? bias.data<double>()[j] : 0.0;
        EXPECT_EQ(z.data<double>()[r * 5 + j - 4], before - bj);
        EXPECT_NEAR(after, scale.data<double>()[j - 4] * (before - bj) + bj, 1e-15);
      }
    }
    // The magnitudes' gradient with the norms held constant: scale = m · inv_norm.
    const Tensor probe = random_tensor(y.shape(), DType::f64, 64);
    const Tensor m = magnitude.clone();
    auto loss = [&] {
      const Tensor s = m.clone(), out = y0.clone(), kept = Tensor::empty({6, 5}, DType::f64);
      for (int64_t i = 0; i < 5; ++i) s.data<double>()[i] *= inv_norm.data<double>()[i];
      ops::dora_scale_forward(out, 4, s, b, kept);
      return dot(out, probe);
    };
    const Tensor dy = probe.clone(), d_magnitude = Tensor::zeros({5}, DType::f64);
    ops::dora_scale_backward(dy, 4, z, scale, inv_norm, d_magnitude);
    expect_gradient(m, d_magnitude, loss, "magnitudes");
    for (int64_t r = 0; r < 6; ++r) {
      for (int64_t j = 0; j < 13; ++j) {
        const double factor = j < 4 || j >= 9 ? 1.0 : scale.data<double>()[j - 4];
        EXPECT_NEAR(dy.data<double>()[r * 13 + j], probe.data<double>()[r * 13 + j] * factor, 1e-15);
      }
    }
  }
}

TEST(Cast, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 lies halfway between two bf16 values: ties go to the even one (1.0);
  // 1 + 3·2^-8 rounds up to 1 + 2^-6... i.e. to the even neighbour 1 + 2^-6.
  Tensor src = Tensor::from(std::vector<float>{1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -2.5f, 1e-3f}, {4});
  Tensor low = Tensor::empty({4}, DType::bf16), back = Tensor::empty({4}, DType::f32);
  ops::cast(src, low);
  ops::cast(low, back);
  auto v = back.to_vector<float>();
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], 1.0f + 4.0f / 256);
  EXPECT_EQ(v[2], -2.5f);
  EXPECT_NEAR(v[3], 1e-3f, 1e-3f / 128);
}

// On the CPU overlapped copies are plain ones, done when start() returns.
TEST(OverlappedCopies, OnTheCpuCopyAtOnceAndCheckTheirTensors) {
  const Tensor host = Tensor::zeros({3, 4}, DType::f32), x = random_tensor({4}, DType::f32, 1);
  ops::OverlappedCopies copies(Device::cpu(), host, 2);
  copies.start(host[1], x, 1);
  copies.wait(1);
  EXPECT_EQ(host[1].to_vector<float>(), x.to_vector<float>());
  EXPECT_EQ(host[0].to_vector<float>(), std::vector<float>(4, 0.0f));
  EXPECT_THROW(copies.start(host[2], Tensor::zeros({5}, DType::f32), 0), Error);
  EXPECT_THROW(copies.start(host[2], Tensor::zeros({4}, DType::f64), 0), Error);
  EXPECT_THROW(ops::OverlappedCopies(Device::cpu(), host, 0), Error);
}

}  // namespace
}  // namespace hone::test
