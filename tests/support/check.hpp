#pragma once
// Test helpers: random tensors, tolerance comparisons, and a finite-difference
// gradient check in fp64.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "hone/core/tensor.hpp"

namespace hone::test {

// Uniform(-scale, scale) values in a CPU tensor of `dtype` (rounded for bf16).
Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double scale = 1.0);

// max |actual - expected| / max |expected|: a relative error over the whole
// tensor, robust to elements that happen to be near zero.
double relative_error(const Tensor& actual, const Tensor& expected);

// Asserts relative_error(actual, expected) <= tolerance, naming `what`.
void expect_close(const Tensor& actual, const Tensor& expected, double tolerance, const std::string& what);

// Padded rows (ops::padded_row_length): `packed` [rows, cols] as [rows, stride]
// on its device, the padding NaN, so that whatever reads it shows.
Tensor with_padded_rows(const Tensor& packed, int64_t stride);
// The first `cols` columns of each row of `padded` [rows, stride], packed.
Tensor packed_columns(const Tensor& padded, int64_t cols);
// The padding of `padded`'s rows past their first `cols` columns, in order.
std::vector<double> padding_of(const Tensor& padded, int64_t cols);

// Checks `analytic`, the gradient of scalar() with respect to the fp64 tensor x,
// by central differences: (scalar(x + h·e_i) - scalar(x - h·e_i)) / 2h for up
// to max_checks elements i spread over x (all when x is smaller). In fp64 with
// h = 1e-6 the truncation and rounding errors are ~1e-10 relative, so
// `tolerance` can be tight (1e-6 relative to the largest gradient element).
void expect_gradient(const Tensor& x, const Tensor& analytic, const std::function<double()>& scalar,
                     const std::string& what, double tolerance = 1e-6, int64_t max_checks = 400);

// Σ a·b over all elements, in double (a projection of outputs onto fixed random
// weights: its gradient w.r.t. the outputs is b).
double dot(const Tensor& a, const Tensor& b);

// The message of the hone::Error f throws, "" when it throws none.
std::string error_of(const std::function<void()>& f);

// A training run's metric `key` by step, from run_dir/metrics.jsonl (e.g.
// "loss/train/total"); steps that did not log it are absent.
std::map<int64_t, double> run_metric(const std::string& run_dir, const std::string& key);

// A path under the source tree, e.g. source_path("tests/reference/llama.safetensors").
std::string source_path(const std::string& relative);

}  // namespace hone::test
