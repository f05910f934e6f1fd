#include "support/check.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hone/core/rng.hpp"
#include "hone/ops/ops.hpp"

namespace hone::test {

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double scale) {
  std::vector<double> values(size_t(shape.numel()));
  Generator(seed).uniform(std::span<double>(values), -scale, scale);
  Tensor f64 = Tensor::from(values, shape);
  if (dtype == DType::f64) return f64;
  Tensor f32 = Tensor::empty(shape, DType::f32);
  ops::cast(f64, f32);
  if (dtype == DType::f32) return f32;
  Tensor out = Tensor::empty(shape, dtype);
  ops::cast(f32, out);
  return out;
}

namespace {

// `from`'s rows [rows, from_width] as rows of `to_width`: the first min of the
// widths copied, the rest `fill`; in double on the host, then in `like`'s dtype
// and on its device.
Tensor rewidened(const Tensor& from, int64_t to_width, double fill, const Tensor& like) {
  const int64_t rows = from.size(0), from_width = from.size(1), kept = std::min(from_width, to_width);
  const std::vector<double> values = from.to_vector<double>();
  std::vector<double> out(size_t(rows * to_width), fill);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(values.begin() + r * from_width, kept, out.begin() + r * to_width);
  }
  Tensor host = Tensor::from(out, {rows, to_width});
  for (const DType step : {DType::f32, DType::bf16}) {  // f64 -> f32 -> bf16, as far as like's dtype
    if (host.dtype() == like.dtype()) break;
    const Tensor narrower = Tensor::empty(host.shape(), step);
    ops::cast(host, narrower);
    host = narrower;
  }
  return host.to(like.device());
}

}  // namespace

Tensor with_padded_rows(const Tensor& packed, int64_t stride) {
  return rewidened(packed, stride, std::numeric_limits<double>::quiet_NaN(), packed);
}

Tensor packed_columns(const Tensor& padded, int64_t cols) { return rewidened(padded, cols, 0.0, padded); }

std::vector<double> padding_of(const Tensor& padded, int64_t cols) {
  const int64_t rows = padded.size(0), stride = padded.size(1);
  const std::vector<double> values = padded.to_vector<double>();
  std::vector<double> padding;
  for (int64_t r = 0; r < rows; ++r) {
    padding.insert(padding.end(), values.begin() + r * stride + cols, values.begin() + (r + 1) * stride);
  }
  return padding;
}

double relative_error(const Tensor& actual, const Tensor& expected) {
  EXPECT_EQ(actual.shape(), expected.shape());
  auto a = actual.to_vector<double>();
  auto e = expected.to_vector<double>();
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < a.size() && i < e.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(a[i] - e[i]));
    max_ref = std::max(max_ref, std::abs(e[i]));
    if (std::isnan(a[i]) != std::isnan(e[i])) return INFINITY;
  }
  return max_ref > 0 ? max_diff / max_ref : max_diff;
}

void expect_close(const Tensor& actual, const Tensor& expected, double tolerance, const std::string& what) {
  const double err = relative_error(actual, expected);
  EXPECT_LE(err, tolerance) << what << ": relative error " << err << " exceeds " << tolerance;
}

double dot(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector<double>();
  auto y = b.to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double sum = 0;
  for (size_t i = 0; i < x.size(); ++i) sum += x[i] * y[i];
  return sum;
}

void expect_gradient(const Tensor& x, const Tensor& analytic, const std::function<double()>& scalar,
                     const std::string& what, double tolerance, int64_t max_checks) {
  ASSERT_EQ(x.dtype(), DType::f64) << what;
  ASSERT_EQ(x.shape(), analytic.shape()) << what;
  const auto grad = analytic.to_vector<double>();
  double max_grad = 0;
  for (double g : grad) max_grad = std::max(max_grad, std::abs(g));
  ASSERT_GT(max_grad, 0.0) << what << ": the analytic gradient is all zeros; the check would prove nothing";
  const double h = 1e-6;
  double* data = x.data<double>();
  const int64_t n = x.numel();
  const int64_t stride = std::max<int64_t>(1, n / max_checks);
  double worst = 0;
  int64_t worst_index = 0;
  // Odd offset: with strided sampling, also visit elements off the tile/row starts.
  for (int64_t i = (stride > 1 ? stride / 2 : 0) % n; i < n; i += stride) {
    const double saved = data[i];
    data[i] = saved + h;
    const double plus = scalar();
    data[i] = saved - h;
    const double minus = scalar();
    data[i] = saved;
    const double numeric = (plus - minus) / (2 * h);
    const double err = std::abs(numeric - grad[size_t(i)]) / max_grad;
    if (err > worst) {
      worst = err;
      worst_index = i;
    }
  }
  EXPECT_LE(worst, tolerance) << what << ": finite-difference mismatch at element " << worst_index << " (analytic "
                              << grad[size_t(worst_index)] << ", relative error " << worst << ")";
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::map<int64_t, double> run_metric(const std::string& run_dir, const std::string& key) {
  std::map<int64_t, double> by_step;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains(key)) by_step[j["step"]] = j[key];
  }
  return by_step;
}

std::string source_path(const std::string& relative) { return std::string(HONE_SOURCE_DIR) + "/" + relative; }

}  // namespace hone::test
