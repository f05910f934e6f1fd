// RMSNorm and LayerNorm (with and without bias): forward against the formula,
// backward against finite differences in fp64, fp32 and bf16 against fp64; the
// residual add before a norm against ops::add and the norm.
#include <cmath>

#include "hone/core/parallel.hpp"
#include "hone/ops/ops.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

constexpr int64_t kRows = 6, kDim = 40;
constexpr double kEps = 1e-5;

Tensor naive_rmsnorm(const Tensor& x, const Tensor& w) {
  auto X = x.to_vector<double>(), W = w.to_vector<double>();
  std::vector<double> y(X.size());
  for (int64_t r = 0; r < kRows; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < kDim; ++j) ms += X[size_t(r * kDim + j)] * X[size_t(r * kDim + j)] / kDim;
    for (int64_t j = 0; j < kDim; ++j) y[size_t(r * kDim + j)] = X[size_t(r * kDim + j)] / std::sqrt(ms + kEps) * W[size_t(j)];
  }
  return Tensor::from(y, x.shape());
}

Tensor naive_layernorm(const Tensor& x, const Tensor& w, const Tensor& b) {
  auto X = x.to_vector<double>(), W = w.to_vector<double>();
  auto B = b.defined() ? b.to_vector<double>() : std::vector<double>(size_t(kDim), 0.0);
  std::vector<double> y(X.size());
  for (int64_t r = 0; r < kRows; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < kDim; ++j) mean += X[size_t(r * kDim + j)] / kDim;
    for (int64_t j = 0; j < kDim; ++j) var += std::pow(X[size_t(r * kDim + j)] - mean, 2) / kDim;
    for (int64_t j = 0; j < kDim; ++j)
      y[size_t(r * kDim + j)] = (X[size_t(r * kDim + j)] - mean) / std::sqrt(var + kEps) * W[size_t(j)] + B[size_t(j)];
  }
  return Tensor::from(y, x.shape());
}

TEST(RmsNorm, ForwardAndBackward) {
  // An offset mean makes the statistics non-trivial.
  Tensor x = random_tensor({2, 3, kDim}, DType::f64, 1, 2.0);
  Tensor w = random_tensor({kDim}, DType::f64, 2);
  Tensor y = Tensor::empty(x.shape(), DType::f64), rstd = Tensor::empty({kRows}, DType::f64);
  ops::rmsnorm_forward(x, w, y, rstd, kEps);
  expect_close(y, naive_rmsnorm(x, w), 1e-13, "rmsnorm forward");

  Tensor probe = random_tensor(x.shape(), DType::f64, 3);
  auto loss = [&] {
    ops::rmsnorm_forward(x, w, y, rstd, kEps);
    return dot(y, probe);
  };
  Tensor dx = Tensor::zeros(x.shape(), DType::f64), dw = Tensor::zeros({kDim}, DType::f64);
  loss();
  ops::rmsnorm_backward(probe, x, w, rstd, dx, dw);
  expect_gradient(x, dx, loss, "rmsnorm dx");
  expect_gradient(w, dw, loss, "rmsnorm dweight");
}

TEST(LayerNorm, ForwardAndBackwardWithAndWithoutBias) {
  for (bool with_bias : {true, false}) {
    Tensor x = random_tensor({kRows, kDim}, DType::f64, 4, 3.0);
    Tensor w = random_tensor({kDim}, DType::f64, 5);
    Tensor b = with_bias ? random_tensor({kDim}, DType::f64, 6) : Tensor();
    Tensor y = Tensor::empty(x.shape(), DType::f64);
    Tensor mean = Tensor::empty({kRows}, DType::f64), rstd = Tensor::empty({kRows}, DType::f64);
    ops::layernorm_forward(x, w, b, y, mean, rstd, kEps);
    expect_close(y, naive_layernorm(x, w, b), 1e-13, "layernorm forward");

    Tensor probe = random_tensor(x.shape(), DType::f64, 7);
    auto loss = [&] {
      ops::layernorm_forward(x, w, b, y, mean, rstd, kEps);
      return dot(y, probe);
    };
    Tensor dx = Tensor::zeros(x.shape(), DType::f64), dw = Tensor::zeros({kDim}, DType::f64);
    Tensor db = with_bias ? Tensor::zeros({kDim}, DType::f64) : Tensor();
    loss();
    ops::layernorm_backward(probe, x, w, mean, rstd, dx, dw, db);
    const std::string tag = with_bias ? " (bias)" : " (no bias)";
    expect_gradient(x, dx, loss, "layernorm dx" + tag);
    expect_gradient(w, dw, loss, "layernorm dweight" + tag);
    if (with_bias) expect_gradient(b, db, loss, "layernorm dbias");
  }
}

// The weight gradient sums over rows in fixed chunks: more rows than one chunk
// exercise that path, and the result must not depend on the thread count.
TEST(RmsNorm, WeightGradientOverManyRowsIsExactAndThreadIndependent) {
  const int64_t rows = 1000;
  Tensor x = random_tensor({rows, 16}, DType::f32, 8), w = random_tensor({16}, DType::f32, 9);
  Tensor dy = random_tensor({rows, 16}, DType::f32, 10);
  Tensor y = Tensor::empty(x.shape(), DType::f32), rstd = Tensor::empty({rows}, DType::f32);
  ops::rmsnorm_forward(x, w, y, rstd, kEps);
  auto weight_grad = [&](int threads) {
    set_num_threads(threads);
    Tensor dx = Tensor::zeros(x.shape(), DType::f32), dw = Tensor::zeros({16}, DType::f32);
    ops::rmsnorm_backward(dy, x, w, rstd, dx, dw);
    return dw.to_vector<float>();
  };
  const int threads = num_threads();
  auto one = weight_grad(1), two = weight_grad(2);
  set_num_threads(threads);
  EXPECT_EQ(one, two);
  // And it is the sum it claims to be.
  auto X = x.to_vector<double>(), DY = dy.to_vector<double>(), R = rstd.to_vector<double>();
  for (int64_t j = 0; j < 16; ++j) {
    double sum = 0;
    for (int64_t r = 0; r < rows; ++r) sum += DY[size_t(r * 16 + j)] * X[size_t(r * 16 + j)] * R[size_t(r)];
    EXPECT_NEAR(one[size_t(j)], sum, 1e-4 * std::max(1.0, std::abs(sum)));
  }
}

TEST(Norms, LowPrecisionMatchesFp64) {
  Tensor x64 = random_tensor({kRows, kDim}, DType::f64, 11, 2.0), w64 = random_tensor({kDim}, DType::f64, 12);
  Tensor w32 = Tensor::empty({kDim}, DType::f32);
  ops::cast(w64, w32);
  Tensor y64 = naive_rmsnorm(x64, w64);
  for (auto [dtype, tolerance] : {std::pair{DType::f32, 1e-6}, std::pair{DType::bf16, 1e-2}}) {
    Tensor x32 = Tensor::empty(x64.shape(), DType::f32);
    ops::cast(x64, x32);
    Tensor x = x32;
    if (dtype == DType::bf16) {
      x = Tensor::empty(x64.shape(), DType::bf16);
      ops::cast(x32, x);
    }
    Tensor y = Tensor::empty(x.shape(), dtype), rstd = Tensor::empty({kRows}, DType::f32);
    ops::rmsnorm_forward(x, w32, y, rstd, kEps);
    expect_close(y, y64, tolerance, fmt::format("rmsnorm {}", dtype_name(dtype)));
  }
}

// The residual add a forward op does on its way is exactly ops::add followed by
// the norm (the sum rounded to x's dtype before it is normalized), also in
// place (the sum written over x).
TEST(Norms, ResidualAddIsExactlyAddThenNorm) {
  const Tensor w = random_tensor({kDim}, DType::f32, 13), b = random_tensor({kDim}, DType::f32, 14);
  for (const DType dtype : {DType::f64, DType::f32, DType::bf16}) {
    const DType stats = dtype == DType::f64 ? DType::f64 : DType::f32;
    const Tensor weight = Tensor::empty({kDim}, stats), bias = Tensor::empty({kDim}, stats);
    ops::cast(w, weight);
    ops::cast(b, bias);
    const Tensor x = random_tensor({kRows, kDim}, dtype, 15, 3.0), branch = random_tensor(x.shape(), dtype, 16);
    for (const bool layernorm : {false, true}) {
      const auto norm = [&](const Tensor& input, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                            const ops::ResidualAdd& residual) {
        if (layernorm) ops::layernorm_forward(input, weight, bias, y, mean, rstd, kEps, residual);
        else ops::rmsnorm_forward(input, weight, y, rstd, kEps, residual);
      };
      const Tensor sum = Tensor::empty(x.shape(), dtype), y = Tensor::empty(x.shape(), dtype);
      const Tensor mean = Tensor::empty({kRows}, stats), rstd = Tensor::empty({kRows}, stats);
      ops::add(x, branch, sum);
      norm(sum, y, mean, rstd, {});
      for (const bool in_place : {false, true}) {
        const std::string what = fmt::format("{} {}{}", layernorm ? "layernorm" : "rmsnorm", dtype_name(dtype),
                                             in_place ? " in place" : "");
        const Tensor fused_sum = in_place ? x.clone() : Tensor::empty(x.shape(), dtype);
        const Tensor fused_y = Tensor::empty(x.shape(), dtype);
        const Tensor fused_mean = Tensor::empty({kRows}, stats), fused_rstd = Tensor::empty({kRows}, stats);
        norm(in_place ? fused_sum : x, fused_y, fused_mean, fused_rstd, {.branch = branch, .sum = fused_sum});
        EXPECT_EQ(fused_sum.to_vector<double>(), sum.to_vector<double>()) << what;
        EXPECT_EQ(fused_y.to_vector<double>(), y.to_vector<double>()) << what;
        EXPECT_EQ(fused_rstd.to_vector<double>(), rstd.to_vector<double>()) << what;
        if (layernorm) {
          EXPECT_EQ(fused_mean.to_vector<double>(), mean.to_vector<double>()) << what;
        }
      }
    }
  }
}

TEST(Norms, ResidualAddChecksItsTensors) {
  const Tensor x = random_tensor({kRows, kDim}, DType::f32, 17), w = random_tensor({kDim}, DType::f32, 18);
  const Tensor y = Tensor::empty(x.shape(), DType::f32), rstd = Tensor::empty({kRows}, DType::f32);
  const Tensor rows = Tensor::empty({kRows - 1, kDim}, DType::f32);
  EXPECT_EQ(error_of([&] { ops::rmsnorm_forward(x, w, y, rstd, kEps, {.branch = x, .sum = Tensor()}); }),
            "add + rmsnorm: a residual add needs a branch and a sum");
  EXPECT_NE(error_of([&] { ops::rmsnorm_forward(x, w, y, rstd, kEps, {.branch = rows, .sum = y}); })
                .find("add + rmsnorm: residual branch"),
            std::string::npos);
  const Tensor bf16_sum = Tensor::empty(x.shape(), DType::bf16);
  EXPECT_NE(error_of([&] { ops::rmsnorm_forward(x, w, y, rstd, kEps, {.branch = x, .sum = bf16_sum}); })
                .find("add + rmsnorm: residual sum"),
            std::string::npos);
}

}  // namespace
}  // namespace hone::test
