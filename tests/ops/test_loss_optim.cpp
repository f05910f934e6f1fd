// Cross-entropy with ignore-index masking, AdamW against torch.optim.AdamW's
// arithmetic, global-norm clipping and learning-rate schedules.
#include <algorithm>
#include <cmath>

#include "hone/optim/adamw.hpp"
#include "hone/optim/lr_schedule.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

TEST(CrossEntropy, LossIsMeanOverUnmaskedAndGradientMatches) {
  const int64_t rows = 6, vocab = 13;
  Tensor logits = random_tensor({rows, vocab}, DType::f64, 1, 4.0);
  std::vector<int32_t> t = {3, ops::kIgnoreIndex, 0, 12, ops::kIgnoreIndex, 7};
  Tensor targets = Tensor::from(t, {rows});
  Tensor losses = Tensor::empty({rows}, DType::f64), lse = Tensor::empty({rows}, DType::f64);
  ops::LossSum sum = ops::cross_entropy_forward(logits, targets, losses, lse);
  EXPECT_EQ(sum.tokens, 4);
  auto Z = logits.to_vector<double>();
  double expected = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (t[size_t(r)] == ops::kIgnoreIndex) continue;
    double s = 0;
    for (int64_t j = 0; j < vocab; ++j) s += std::exp(Z[size_t(r * vocab + j)]);
    expected += std::log(s) - Z[size_t(r * vocab + t[size_t(r)])];
  }
  EXPECT_NEAR(sum.mean(), expected / 4, 1e-13);

  // Gradient of the mean loss.
  auto loss = [&] { return ops::cross_entropy_forward(logits, targets, losses, lse).mean(); };
  Tensor grad = logits.clone();
  ops::cross_entropy_forward(grad, targets, losses, lse);
  ops::cross_entropy_backward(grad, targets, lse, 1.0 / 4);
  expect_gradient(logits, grad, loss, "cross-entropy dlogits");
  // Masked rows get exactly zero gradient.
  auto G = grad.to_vector<double>();
  for (int64_t j = 0; j < vocab; ++j) EXPECT_EQ(G[size_t(1 * vocab + j)], 0.0);
}

// Row weights (DPO's per-sequence scale): the gradient of Σ w_r · loss_r,
// checked by finite differences, with a negative weight and a zero one.
TEST(CrossEntropy, RowWeightsScaleEachRowsGradient) {
  const int64_t rows = 5, vocab = 11;
  Tensor logits = random_tensor({rows, vocab}, DType::f64, 4, 3.0);
  const Tensor targets = Tensor::from(std::vector<int32_t>{2, 10, ops::kIgnoreIndex, 0, 5}, {rows});
  const std::vector<double> w = {0.5, -2.0, 3.0, 0.0, 1.25};
  const Tensor weights = Tensor::from(w, {rows});
  Tensor losses = Tensor::empty({rows}, DType::f64), lse = Tensor::empty({rows}, DType::f64);
  auto weighted_loss = [&] {
    ops::cross_entropy_forward(logits, targets, losses, lse);
    const std::vector<double> l = losses.to_vector<double>();
    double sum = 0;
    for (size_t r = 0; r < w.size(); ++r) sum += 0.5 * w[r] * l[r];
    return sum;
  };
  Tensor grad = logits.clone();
  ops::cross_entropy_forward(grad, targets, losses, lse);
  ops::cross_entropy_backward(grad, targets, lse, 0.5, {}, weights);
  expect_gradient(logits, grad, weighted_loss, "weighted cross-entropy dlogits");
  const Tensor f32_weights = Tensor::from(std::vector<float>(w.begin(), w.end()), {rows});
  EXPECT_THROW(ops::cross_entropy_backward(grad, targets, lse, 0.5, {}, f32_weights), Error);  // lse's dtype
}

TEST(CrossEntropy, Bf16LogitsGiveFp32AccurateLoss) {
  Tensor logits32 = random_tensor({8, 1000}, DType::f32, 2, 5.0);
  Tensor logits16 = Tensor::empty(logits32.shape(), DType::bf16);
  ops::cast(logits32, logits16);
  Tensor rounded = Tensor::empty(logits32.shape(), DType::f32);
  ops::cast(logits16, rounded);
  Tensor targets = Tensor::from(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 999}, {8});
  Tensor losses = Tensor::empty({8}, DType::f32), lse = Tensor::empty({8}, DType::f32);
  const double from_bf16 = ops::cross_entropy_forward(logits16, targets, losses, lse).mean();
  const double from_rounded_f32 = ops::cross_entropy_forward(rounded, targets, losses, lse).mean();
  EXPECT_NEAR(from_bf16, from_rounded_f32, 1e-5);  // the arithmetic is fp32; only the storage is bf16
}

// Training's fused pass (one exp per logit, kept for the gradient) gives the
// forward pass's losses and lse and the backward pass's gradient to the storage
// type's rounding (rows longer than one logsumexp chunk included).
TEST(CrossEntropy, ForwardBackwardInOnePassEqualsTheTwoPasses) {
  for (const DType dtype : {DType::f64, DType::f32, DType::bf16}) {
    const int64_t rows = 5, vocab = 4099;
    const Tensor logits = random_tensor({rows, vocab}, dtype, 3, 6.0);
    const Tensor targets = Tensor::from(std::vector<int32_t>{4098, ops::kIgnoreIndex, 0, 2048, 17}, {rows});
    const DType compute = dtype == DType::f64 ? DType::f64 : DType::f32;  // losses and lse: the compute type
    Tensor losses = Tensor::empty({rows}, compute), lse = Tensor::empty({rows}, compute);
    Tensor two_pass = logits.clone();
    const ops::LossSum expected = ops::cross_entropy_forward(two_pass, targets, losses, lse);
    ops::cross_entropy_backward(two_pass, targets, lse, 0.25);

    Tensor fused = logits.clone();
    Tensor fused_losses = Tensor::empty({rows}, compute), fused_lse = Tensor::empty({rows}, compute);
    const ops::LossSum got = ops::cross_entropy_forward_backward(fused, targets, fused_losses, fused_lse, 0.25);
    // Relative rounding of the compute type (losses, lse) and of the gradient:
    // the two passes' exp(z - lse) carries lse's rounding (|z - lse| up to ~20
    // here, times f32's 6e-8); bf16 results may sit one step (2^-7) apart.
    const double compute_eps = dtype == DType::f64 ? 1e-13 : 1e-6;
    const double storage_eps = dtype == DType::bf16 ? 1.0 / 128 : dtype == DType::f32 ? 4e-6 : compute_eps;
    EXPECT_NEAR(got.sum, expected.sum, compute_eps * std::abs(expected.sum)) << dtype_name(dtype);
    EXPECT_EQ(got.tokens, 4);
    const auto max_relative_error = [](const std::vector<double>& a, const std::vector<double>& b) {
      double worst = 0;
      for (size_t i = 0; i < a.size(); ++i)
        if (a[i] != b[i]) worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(std::abs(a[i]), std::abs(b[i])));
      return worst;
    };
    EXPECT_LE(max_relative_error(fused_losses.to_vector<double>(), losses.to_vector<double>()), compute_eps)
        << dtype_name(dtype);
    EXPECT_LE(max_relative_error(fused_lse.to_vector<double>(), lse.to_vector<double>()), compute_eps)
        << dtype_name(dtype);
    const std::vector<double> gradient = fused.to_vector<double>();
    EXPECT_LE(max_relative_error(gradient, two_pass.to_vector<double>()), storage_eps) << dtype_name(dtype);
    for (int64_t j = 0; j < vocab; ++j) EXPECT_EQ(gradient[size_t(vocab + j)], 0.0);  // the ignored row
  }
}

// Rows of logits padded to ops::padded_row_length (the output head's on a GPU;
// VocabPart::columns says how many hold classes): the packed rows' losses and
// gradients exactly, the padding not read (it is NaN) and its gradient 0.
TEST(CrossEntropy, PaddedRowsGiveThePackedLossesAndGradients) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const int64_t rows = 4, vocab = 13, stride = ops::padded_row_length(vocab, dtype);
    const ops::VocabPart padded{.columns = vocab};
    const Tensor logits = random_tensor({rows, vocab}, dtype, 3, 6.0);
    const Tensor targets = Tensor::from(std::vector<int32_t>{12, ops::kIgnoreIndex, 0, 5}, {rows});
    auto per_row = [&] { return Tensor::empty({rows}, DType::f32); };
    const Tensor losses = per_row(), lse = per_row(), padded_losses = per_row(), padded_lse = per_row();
    const std::string what(dtype_name(dtype));

    const Tensor gradient = logits.clone(), padded_gradient = with_padded_rows(logits, stride);
    const ops::LossSum expected = ops::cross_entropy_forward(gradient, targets, losses, lse);
    const ops::LossSum got = ops::cross_entropy_forward(padded_gradient, targets, padded_losses, padded_lse, padded);
    EXPECT_EQ(got.sum, expected.sum) << what;
    EXPECT_EQ(padded_losses.to_vector<double>(), losses.to_vector<double>()) << what;
    EXPECT_EQ(padded_lse.to_vector<double>(), lse.to_vector<double>()) << what;
    ops::cross_entropy_backward(gradient, targets, lse, 0.5);
    ops::cross_entropy_backward(padded_gradient, targets, padded_lse, 0.5, padded);
    EXPECT_EQ(packed_columns(padded_gradient, vocab).to_vector<double>(), gradient.to_vector<double>()) << what;
    EXPECT_EQ(padding_of(padded_gradient, vocab), std::vector<double>(size_t(rows * (stride - vocab)), 0.0)) << what;

    const Tensor fused = logits.clone(), padded_fused = with_padded_rows(logits, stride);
    ops::cross_entropy_forward_backward(fused, targets, losses, lse, 0.5);
    ops::cross_entropy_forward_backward(padded_fused, targets, padded_losses, padded_lse, 0.5, padded);
    EXPECT_EQ(padded_losses.to_vector<double>(), losses.to_vector<double>()) << what;
    EXPECT_EQ(packed_columns(padded_fused, vocab).to_vector<double>(), fused.to_vector<double>()) << what;
    EXPECT_EQ(padding_of(padded_fused, vocab), std::vector<double>(size_t(rows * (stride - vocab)), 0.0)) << what;

    const Tensor wider = Tensor::zeros({rows, stride + 1}, dtype);
    EXPECT_NE(error_of([&] { ops::cross_entropy_forward(wider, targets, losses, lse, padded); })
                  .find("logits rows of 17 for 13 classes are neither packed nor padded"),
              std::string::npos);
  }
}

TEST(CrossEntropy, RejectsTargetOutsideVocabulary) {
  Tensor logits = Tensor::zeros({2, 5}, DType::f32), losses = Tensor::empty({2}, DType::f32);
  Tensor lse = Tensor::empty({2}, DType::f32);
  Tensor targets = Tensor::from(std::vector<int32_t>{1, 5}, {2});
  EXPECT_THROW(ops::cross_entropy_forward(logits, targets, losses, lse), Error);
  EXPECT_THROW(ops::cross_entropy_forward_backward(logits, targets, losses, lse, 1.0), Error);
}

// Tensor parallelism's split vocabulary: each part of the columns gives its own
// logsumexp and lse - (the target's logit where it holds the target, else 0);
// with the whole logsumexp, the parts' gradients are the whole gradient's columns.
TEST(CrossEntropy, PartsOfTheVocabularyGiveWhatTheWholeLossIsMadeOf) {
  const int64_t rows = 5, vocab = 13;
  const Tensor logits = random_tensor({rows, vocab}, DType::f64, 3, 4.0);
  const std::vector<int32_t> t = {3, ops::kIgnoreIndex, 12, 6, 5};
  const Tensor targets = Tensor::from(t, {rows});
  Tensor losses = Tensor::empty({rows}, DType::f64), lse = Tensor::empty({rows}, DType::f64);
  ops::cross_entropy_forward(logits, targets, losses, lse);
  Tensor whole_grad = logits.clone();
  ops::cross_entropy_backward(whole_grad, targets, lse, 0.5);
  const std::vector<double> Z = logits.to_vector<double>();
  const std::vector<double> G = whole_grad.to_vector<double>();

  for (const auto& [first, columns] : {std::pair<int64_t, int64_t>{0, 6}, {6, 7}}) {
    Tensor part = Tensor::empty({rows, columns}, DType::f64);
    for (int64_t r = 0; r < rows; ++r) part[r].copy_from(logits[r].slice(first, {columns}));
    const ops::VocabPart vocab_part{.first = first, .classes = vocab};
    Tensor part_losses = Tensor::empty({rows}, DType::f64), part_lse = Tensor::empty({rows}, DType::f64);
    const ops::LossSum sum = ops::cross_entropy_forward(part, targets, part_losses, part_lse, vocab_part);
    EXPECT_EQ(sum.tokens, 4);
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t j = first; j < first + columns; ++j) s += std::exp(Z[size_t(r * vocab + j)]);
      EXPECT_NEAR(part_lse.to_vector<double>()[size_t(r)], std::log(s), 1e-13);
      const int32_t target = t[size_t(r)];
      const bool held = target >= first && target < first + columns;
      const double expected = target == ops::kIgnoreIndex ? 0.0
                              : held                      ? std::log(s) - Z[size_t(r * vocab + target)]
                                                          : std::log(s);
      EXPECT_NEAR(part_losses.to_vector<double>()[size_t(r)], expected, 1e-13) << "row " << r << " from " << first;
    }
    ops::cross_entropy_backward(part, targets, lse, 0.5, vocab_part);  // the whole vocabulary's logsumexp
    const std::vector<double> P = part.to_vector<double>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < columns; ++j)
        EXPECT_NEAR(P[size_t(r * columns + j)], G[size_t(r * vocab + first + j)], 1e-15) << r << " " << first + j;
  }
  // Targets are checked against the whole vocabulary; a part must fit in it.
  Tensor part = Tensor::zeros({rows, 6}, DType::f64);
  const Tensor bad = Tensor::from(std::vector<int32_t>{3, 1, 13, 0, 0}, {rows});
  EXPECT_THROW(ops::cross_entropy_forward(part, bad, losses, lse, {.first = 6, .classes = vocab}), Error);
  EXPECT_THROW(ops::cross_entropy_forward(part, targets, losses, lse, {.first = 8, .classes = vocab}), Error);
}

// torch.optim.AdamW, step by step, for one scalar.
double torch_adamw(double p, const std::vector<double>& grads, double lr, double b1, double b2, double eps, double wd) {
  double m = 0, v = 0;
  for (size_t t = 1; t <= grads.size(); ++t) {
    const double g = grads[t - 1];
    p *= 1 - lr * wd;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double c1 = 1 - std::pow(b1, double(t)), c2 = 1 - std::pow(b2, double(t));
    p -= lr / c1 * m / (std::sqrt(v) / std::sqrt(c2) + eps);
  }
  return p;
}

TEST(AdamW, MatchesTorchArithmeticWithDecayOnlyWhereDeclared) {
  ParameterSet params;
  // Declared norm first: the flat layout puts decayed parameters first anyway.
  Parameter& norm = params.declare("norm", {3}, /*decay=*/false);
  Parameter& matrix = params.declare("matrix", {2, 2}, /*decay=*/true);
  params.allocate(DType::f64, DType::f64, Device::cpu());
  EXPECT_EQ(matrix.offset, 0);
  EXPECT_EQ(norm.offset, 4);
  const std::vector<double> init_norm = {1.0, -0.75, 0.1}, init_matrix = {0.5, -1.0, 2.0, 0.25};
  norm.value.copy_from(Tensor::from(init_norm, {3}));
  matrix.value.copy_from(Tensor::from(init_matrix, {2, 2}));
  AdamWConfig cfg{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  AdamW opt(params, cfg);
  std::vector<std::vector<double>> norm_grads(3), matrix_grads(4);
  for (int step = 0; step < 5; ++step) {
    std::vector<double> gn(3), gm(4);
    for (size_t i = 0; i < 3; ++i) norm_grads[i].push_back(gn[i] = std::sin(double(i * 7 + step)));
    for (size_t i = 0; i < 4; ++i) matrix_grads[i].push_back(gm[i] = std::cos(double(i * 5 + step)));
    norm.grad.copy_from(Tensor::from(gn, {3}));
    matrix.grad.copy_from(Tensor::from(gm, {2, 2}));
    opt.step(cfg.lr);
  }
  auto pn = norm.value.to_vector<double>(), pm = matrix.value.to_vector<double>();
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(pn[i], torch_adamw(init_norm[i], norm_grads[i], 0.01, 0.9, 0.95, 1e-8, 0.0), 1e-14) << "norm " << i;
  for (size_t i = 0; i < 4; ++i)
    EXPECT_NEAR(pm[i], torch_adamw(init_matrix[i], matrix_grads[i], 0.01, 0.9, 0.95, 1e-8, 0.1), 1e-14)
        << "matrix " << i;
}

TEST(AdamW, Bf16ComputeCopyFollowsMasterWeights) {
  ParameterSet params;
  params.declare("w", {8}, true);
  params.allocate(DType::f32, DType::bf16, Device::cpu());
  params.values().copy_from(random_tensor({8}, DType::f32, 1));
  params.grads().copy_from(random_tensor({8}, DType::f32, 2));
  AdamW opt(params, AdamWConfig{});
  opt.step(0.1);
  Tensor expected = Tensor::empty({8}, DType::bf16);
  ops::cast(params.values(), expected);
  EXPECT_EQ(params.compute().to_vector<float>(), expected.to_vector<float>());
}

TEST(ClipGradNorm, NormCoefficientAndAdamWWithScaledGradients) {
  ParameterSet params;
  params.declare("a", {2}, true);
  params.declare("b", {2}, false);
  params.allocate(DType::f32, DType::f32, Device::cpu());
  params.grads().copy_from(Tensor::from(std::vector<float>{3, 0, 0, 4}, {4}));
  EXPECT_NEAR(grad_norm(params), 5.0, 1e-6);
  EXPECT_EQ(clip_coefficient(5.0, 10.0), 1.0);  // under the limit: unchanged
  EXPECT_NEAR(clip_coefficient(5.0, 1.0), 1.0 / (5.0 + 1e-6), 1e-12);
  EXPECT_EQ(clip_coefficient(5.0, 0.0), 1.0);   // clipping off
  // AdamW with a gradient scale equals AdamW on gradients scaled beforehand.
  ParameterSet other;
  other.declare("a", {2}, true);
  other.declare("b", {2}, false);
  other.allocate(DType::f32, DType::f32, Device::cpu());
  other.grads().copy_from(Tensor::from(std::vector<float>{0.6f, 0, 0, 0.8f}, {4}));
  AdamW fused(params, AdamWConfig{.lr = 0.1}), plain(other, AdamWConfig{.lr = 0.1});
  fused.step(0.1, 0.2);
  plain.step(0.1);
  auto x = params.values().to_vector<float>(), y = other.values().to_vector<float>();
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(x[i], y[i], 1e-7);
  EXPECT_NE(x[0], 0.0f);
}

TEST(LrSchedule, WarmupThenShape) {
  LrSchedule s{.kind = LrScheduleKind::cosine, .peak_lr = 1.0, .min_lr = 0.1, .warmup_steps = 10, .total_steps = 110};
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);
  EXPECT_NEAR(s.at(60), 0.55, 1e-12);  // halfway through the cosine
  EXPECT_NEAR(s.at(110), 0.1, 1e-12);
  s.kind = LrScheduleKind::linear;
  EXPECT_NEAR(s.at(60), 0.55, 1e-12);
  s.kind = LrScheduleKind::constant;
  EXPECT_DOUBLE_EQ(s.at(100), 1.0);
  s.kind = LrScheduleKind::wsd;
  s.decay_fraction = 0.2;
  EXPECT_DOUBLE_EQ(s.at(88), 1.0);  // stable until the last 20% (22) of all 110 steps
  EXPECT_NEAR(s.at(89), 1.0 - 0.9 / 22, 1e-12);  // the first of them already decays
  EXPECT_NEAR(s.at(99), 0.55, 1e-12);            // halfway through the decay
  // The last step a decay step above min_lr, which the step after it would
  // take (torchtitan's virtual last step): it still trains.
  EXPECT_NEAR(s.at(109), 0.1 + 0.9 / 22, 1e-12);
  EXPECT_NEAR(s.at(110), 0.1, 1e-12);
  // A decay that would reach into the warmup takes the steps after it (torchtitan's clamp).
  LrSchedule w{.kind = LrScheduleKind::wsd, .peak_lr = 1.0, .min_lr = 0.1, .warmup_steps = 10, .total_steps = 20,
               .decay_fraction = 0.6};
  EXPECT_EQ(w.wsd_decay_steps(), 10);
  EXPECT_DOUBLE_EQ(w.at(10), 1.0);
  EXPECT_NEAR(w.at(11), 0.91, 1e-12);
  EXPECT_NEAR(w.at(19), 0.19, 1e-12);
  EXPECT_THROW(parse_lr_schedule("cosin"), Error);
}

}  // namespace
}  // namespace hone::test
