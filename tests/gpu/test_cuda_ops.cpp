// Every CUDA op against the CPU implementation of the same op on the same random
// inputs: f32 to fp32 rounding (1e-5 element-wise, 1e-4 through reductions,
// relative to the largest element), bf16 to bf16 rounding (1e-2, 2e-2 for
// gradients through attention). Forward and backward, accumulating outputs
// prefilled with random values, and the errors that inputs on the device can
// cause (bad token ids, bad targets), which must read as on the CPU.
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <tuple>

#include "cuda_test.hpp"
#include "hone/core/profiler.hpp"
#include "hone/core/rng.hpp"
#include "hone/kernels/cuda/attention_cudnn.hpp"
#include "hone/kernels/cuda/gemm.hpp"
#include "hone/kernels/cuda/runtime.hpp"
#include "hone/ops/ops.hpp"

namespace hone::test {
namespace {

constexpr DType kDtypes[] = {DType::f32, DType::bf16};

double tolerance(DType dtype, double f32, double bf16 = 1e-2) { return dtype == DType::f32 ? f32 : bf16; }

std::string named(std::string_view what, DType dtype) { return fmt::format("{} {}", what, dtype_name(dtype)); }

// Compares a CUDA result with the CPU's.
void expect_match(const Tensor& cuda, const Tensor& cpu, double tol, const std::string& what) {
  ASSERT_TRUE(cuda.device().is_cuda()) << what;
  expect_close(cuda, cpu, tol, what);
}

Tensor ids(const std::vector<int32_t>& values, const Shape& shape) { return Tensor::from(values, shape); }

std::vector<int32_t> random_ids(int64_t n, int32_t bound, uint64_t seed) {
  Generator g(seed);
  std::vector<int32_t> v(size_t(n), 0);
  for (int32_t& x : v) x = int32_t(g.next_below(uint64_t(bound)));
  return v;
}

TEST_F(Cuda, MatmulEveryTransposeBatchedWithAlphaBeta) {
  const int64_t batch = 3, m = 37, n = 29, k = 53;
  for (const auto& [ab, c_type] : {std::pair{DType::f32, DType::f32}, std::pair{DType::bf16, DType::f32},
                                  std::pair{DType::bf16, DType::bf16}}) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        const Shape a_shape = ta ? Shape{batch, k, m} : Shape{batch, m, k};
        const Shape b_shape = tb ? Shape{batch, n, k} : Shape{batch, k, n};
        const Tensor a = random_tensor(a_shape, ab, 1), b = random_tensor(b_shape, ab, 2);
        const Tensor c = random_tensor({batch, m, n}, c_type, 3), c_gpu = gpu(c);
        ops::matmul(a, ta, b, tb, c, 0.5f, 1.0f);
        ops::matmul(gpu(a), ta, gpu(b), tb, c_gpu, 0.5f, 1.0f);
        expect_match(c_gpu, c, tolerance(c_type, 1e-5),
                     fmt::format("matmul {}->{} trans {} {}", dtype_name(ab), dtype_name(c_type), ta, tb));
      }
    }
  }
}

// HONE_PROFILE's clock on the GPU: marks queued with the work, the time
// between them read after the device passed them, each mark reused once
// released.
TEST_F(Cuda, ProfileClockTimesTheQueuedWorkAndReusesItsMarks) {
  const Tensor a = gpu(random_tensor({256, 256}, DType::bf16, 1)), c = Tensor::zeros({256, 256}, DType::f32, kGpu);
  ops::matmul(a, false, a, true, c, 1.0f, 0.0f);  // the device has started
  const DeviceClock& clock = kernels::cuda::profile_clock();
  void* const first = clock.mark();
  ASSERT_NE(first, nullptr);
  for (int run = 0; run < 4; ++run) ops::matmul(a, false, a, true, c, 1.0f, 1.0f);
  void* const last = clock.mark();
  ASSERT_NE(last, nullptr);
  EXPECT_NE(first, last);
  const double seconds = clock.seconds_between(first, last);
  EXPECT_GE(seconds, 0.0);
  EXPECT_LT(seconds, 10.0);
  EXPECT_TRUE(clock.passed(first));
  EXPECT_TRUE(clock.passed(last));
  clock.release(first);
  void* const again = clock.mark();
  EXPECT_EQ(again, first);
  for (int run = 0; run < 4; ++run) ops::matmul(a, false, a, true, c, 1.0f, 1.0f);
  void* const pending = clock.mark();
  (void)clock.passed(pending);  // on a GPU maybe cudaErrorNotReady, which the next launch check must not see
  EXPECT_EQ(error_of([&] { ops::gelu_forward(a, a, ops::GeluApproximation::tanh); }), "");
  ops::synchronize(kGpu);
  EXPECT_TRUE(clock.passed(pending));
  for (void* mark : {again, last, pending}) clock.release(mark);
}

// HONE_PROFILE=products on the GPU: a linear layer's op timed on the device's
// clock, its product listed by shape with its fused bias, both with a rate.
TEST_F(Cuda, ProfileListsTheProductsOfOpsOnTheGpu) {
  setenv("HONE_PROFILE", "products", 1);  // read once per process, at the first op
  if (!profiling_products()) GTEST_SKIP() << "an earlier test in this process ran an op without HONE_PROFILE";
  const Tensor x = gpu(random_tensor({64, 32}, DType::bf16, 1)), w = gpu(random_tensor({48, 32}, DType::bf16, 2));
  const Tensor bias = gpu(random_tensor({48}, DType::f32, 3)), y = Tensor::empty({64, 48}, DType::bf16, kGpu);
  reset_profile();
  ops::linear_forward(x, w, bias, y);
  flush_profile();
  const std::string report = profile_report();
  reset_profile();
  EXPECT_NE(report.find("\nlinear   "), std::string::npos) << report;
  EXPECT_NE(report.find("\nlinear: 64x48x32 NT +bias   "), std::string::npos) << report;
  EXPECT_EQ(report.find("not timed"), std::string::npos) << report;
}

// Rows stored padded (the output head's logits, GemmArgs' row strides) in
// cuBLASLt's layouts: every operand padded, every transpose, beta 0 and 1,
// against the CPU's packed product; C's padding stays as it was. Also an empty
// reduction into padded rows, and a linear layer writing and reading them.
TEST_F(Cuda, MatmulAndLinearOnPaddedRows) {
  const int64_t m = 37, n = 29, k = 53;
  for (const auto& [ab, c_type] : {std::pair{DType::f32, DType::f32}, std::pair{DType::bf16, DType::f32},
                                  std::pair{DType::bf16, DType::bf16}}) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        for (const float beta : {0.0f, 1.0f}) {
          const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, ab, 1);
          const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, ab, 2);
          const Tensor c = random_tensor({m, n}, c_type, 3);
          const int64_t lda = ops::padded_row_length(a.size(1), ab), ldb = ops::padded_row_length(b.size(1), ab);
          const int64_t ldc = ops::padded_row_length(n, c_type);
          const Tensor padded_a = gpu(with_padded_rows(a, lda)), padded_b = gpu(with_padded_rows(b, ldb));
          const Tensor padded_c = gpu(with_padded_rows(c, ldc));
          ops::matmul(a, ta, b, tb, c, 0.5f, beta);
          kernels::cuda::gemm({.m = m, .n = n, .k = k, .trans_a = ta, .trans_b = tb, .alpha = 0.5f, .beta = beta,
                               .a = padded_a.raw(), .b = padded_b.raw(), .c = padded_c.raw(), .ab_type = ab,
                               .c_type = c_type, .lda = lda, .ldb = ldb, .ldc = ldc});
          const std::string what = fmt::format("padded {}->{} trans {} {} beta {}", dtype_name(ab),
                                               dtype_name(c_type), ta, tb, beta);
          expect_close(packed_columns(padded_c, n), c, tolerance(c_type, 1e-5), what);
          for (const double v : padding_of(padded_c, n)) EXPECT_TRUE(std::isnan(v)) << what;
        }
      }
    }
  }
  const int64_t ldc = ops::padded_row_length(n, DType::bf16);
  const Tensor empty_product = gpu(with_padded_rows(random_tensor({m, n}, DType::bf16, 4), ldc));
  const Tensor no_columns = Tensor::empty({m, 0}, DType::bf16, kGpu), no_rows = Tensor::empty({0, n}, DType::bf16, kGpu);
  kernels::cuda::gemm({.m = m, .n = n, .k = 0, .a = no_columns.raw(), .b = no_rows.raw(), .c = empty_product.raw(),
                       .ab_type = DType::bf16, .c_type = DType::bf16, .ldc = ldc});
  EXPECT_EQ(packed_columns(empty_product, n).to_vector<double>(), std::vector<double>(size_t(m * n), 0.0));
  for (const double v : padding_of(empty_product, n)) EXPECT_TRUE(std::isnan(v)) << "empty reduction";

  for (const DType dtype : kDtypes) {
    const int64_t out = 29, stride = ops::padded_row_length(out, dtype);
    const Tensor x = random_tensor({m, k}, dtype, 5), w = random_tensor({out, k}, dtype, 6);
    const Tensor y = Tensor::empty({m, out}, dtype), y_gpu = gpu(with_padded_rows(y, stride));
    ops::linear_forward(x, w, Tensor(), y);
    ops::linear_forward(gpu(x), gpu(w), Tensor(), y_gpu);
    expect_close(packed_columns(y_gpu, out), y, tolerance(dtype, 1e-5), named("linear into padded rows", dtype));
    const Tensor dy = random_tensor({m, out}, dtype, 7);
    const Tensor dx = Tensor::empty({m, k}, dtype), dw = Tensor::empty({out, k}, DType::f32);
    const Tensor dx_gpu = Tensor::empty({m, k}, dtype, kGpu), dw_gpu = Tensor::empty({out, k}, DType::f32, kGpu);
    ops::linear_backward(dy, x, w, dx, dw, Tensor(), false, false);
    ops::linear_backward(gpu(with_padded_rows(dy, stride)), gpu(x), gpu(w), dx_gpu, dw_gpu, Tensor(), false, false);
    expect_match(dx_gpu, dx, tolerance(dtype, 1e-5), named("linear backward from padded rows (input)", dtype));
    expect_match(dw_gpu, dw, 1e-5, named("linear backward from padded rows (weight)", dtype));
  }
}

// An empty reduction (k = 0) launches no GEMM: C = beta·C, with beta 0 or 1
// as on the CPU, and a linear layer of no inputs gives its bias.
TEST_F(Cuda, MatmulAndLinearWithAnEmptyReduction) {
  const int64_t m = 5, n = 7;
  for (const DType dtype : kDtypes) {
    const Tensor a = Tensor::empty({1, m, 0}, dtype), b = Tensor::empty({1, 0, n}, dtype);
    for (const float beta : {0.0f, 1.0f}) {
      const Tensor c = random_tensor({1, m, n}, dtype, 6), c_gpu = gpu(c);
      ops::matmul(a, false, b, false, c, 1.0f, beta);
      ops::matmul(gpu(a), false, gpu(b), false, c_gpu, 1.0f, beta);
      expect_match(c_gpu, c, 0, named(beta == 0 ? "empty matmul, beta 0" : "empty matmul, beta 1", dtype));
    }
    const Tensor x = Tensor::empty({m, 0}, dtype), w = Tensor::empty({n, 0}, dtype);
    const Tensor bias = random_tensor({n}, DType::f32, 7);
    const Tensor y = Tensor::empty({m, n}, dtype), y_gpu = Tensor::empty({m, n}, dtype, kGpu);
    ops::linear_forward(x, w, bias, y);
    ops::linear_forward(gpu(x), gpu(w), gpu(bias), y_gpu);
    expect_match(y_gpu, y, 0, named("linear of no inputs", dtype));
  }
}

TEST_F(Cuda, MatmulOnBuffersAlignedToOneElement) {
  // Slices of flat buffers start anywhere; cuBLASLt must be told.
  for (const DType dtype : kDtypes) {
    const int64_t m = 24, n = 40, k = 16;
    const Tensor a_buf = random_tensor({1 + m * k}, dtype, 4), b_buf = random_tensor({1 + k * n}, dtype, 5);
    const Tensor a = a_buf.slice(1, {1, m, k}), b = b_buf.slice(1, {1, k, n});
    const Tensor c = Tensor::zeros({1 + m * n}, dtype), c_gpu = gpu(c);
    ops::matmul(a, false, b, false, c.slice(1, {1, m, n}));
    ops::matmul(gpu(a_buf).slice(1, {1, m, k}), false, gpu(b_buf).slice(1, {1, k, n}), false,
                c_gpu.slice(1, {1, m, n}));
    expect_match(c_gpu, c, tolerance(dtype, 1e-5), named("misaligned matmul", dtype));
  }
}

TEST_F(Cuda, LinearForwardAndBackwardWithBias) {
  for (const DType dtype : kDtypes) {
    for (const bool accumulate : {false, true}) {
      const Tensor x = random_tensor({2, 5, 24}, dtype, 6), w = random_tensor({16, 24}, dtype, 7);
      const Tensor bias = random_tensor({16}, DType::f32, 8);
      const Tensor y = Tensor::empty({2, 5, 16}, dtype), y_gpu = Tensor::empty({2, 5, 16}, dtype, kGpu);
      ops::linear_forward(x, w, bias, y);
      ops::linear_forward(gpu(x), gpu(w), gpu(bias), y_gpu);
      expect_match(y_gpu, y, tolerance(dtype, 1e-5), named("linear forward", dtype));

      const Tensor dy = random_tensor(y.shape(), dtype, 9);
      const Tensor dx = random_tensor(x.shape(), dtype, 10), dw = random_tensor(w.shape(), DType::f32, 11);
      const Tensor db = random_tensor({16}, DType::f32, 12);
      const Tensor dx_gpu = gpu(dx), dw_gpu = gpu(dw), db_gpu = gpu(db);
      ops::linear_backward(dy, x, w, dx, dw, db, accumulate);
      ops::linear_backward(gpu(dy), gpu(x), gpu(w), dx_gpu, dw_gpu, db_gpu, accumulate);
      expect_match(dx_gpu, dx, tolerance(dtype, 1e-5), named("linear dx", dtype));
      expect_match(dw_gpu, dw, 1e-5, named("linear dweight", dtype));
      expect_match(db_gpu, db, 1e-5, named("linear dbias", dtype));
    }
  }
}

// A bias sliced from a flat buffer, aligned to its 4 bytes alone, is added
// after the product instead of in cuBLASLt's epilogue (by a kernel whose
// threads take a row's columns: many rows of 16, and rows longer than a
// block); and a bias gradient over more rows than 256 chunks of 64 sums
// longer chunks.
TEST_F(Cuda, LinearWithAMisalignedBiasAndManyRows) {
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{20000, 16}, {9, 300}}) {
    const Tensor bias = random_tensor({cols}, DType::f32, 13);
    for (const DType dtype : kDtypes) {
      const std::string shape = fmt::format("{} x {}", rows, cols);
      const Tensor x = random_tensor({rows, 24}, dtype, 14), w = random_tensor({cols, 24}, dtype, 15);
      const Tensor y = Tensor::empty({rows, cols}, dtype), y_gpu = Tensor::empty({rows, cols}, dtype, kGpu);
      ops::linear_forward(x, w, bias, y);
      ops::linear_forward(gpu(x), gpu(w), gpu_at(bias, 1), y_gpu);
      expect_match(y_gpu, y, tolerance(dtype, 1e-5), named("linear forward, misaligned bias, " + shape, dtype));
      const Tensor dy = random_tensor(y.shape(), dtype, 16);
      const Tensor db = Tensor::zeros({cols}, DType::f32), db_gpu = Tensor::zeros({cols}, DType::f32, kGpu);
      ops::linear_backward(dy, x, w, Tensor(), Tensor(), db);
      ops::linear_backward(gpu(dy), gpu(x), gpu(w), Tensor(), Tensor(), db_gpu);
      expect_match(db_gpu, db, 1e-5, named("linear dbias, " + shape, dtype));
    }
  }
}

// A GELU MLP's up projection with its activation, and the down projection's
// input gradient through it: on a GPU, bf16's tanh GELU runs in cuBLASLt's
// epilogue where its rules allow (rows a multiple of 8 long, 16-byte aligned
// pre-activations), and kernels follow a plain product where they do not (36
// columns; a pre-activation one element off). Both must match the CPU. Cases:
// dtype, GELU, the up projection's outputs, a bias or none, elements into the
// GPU's pre-activation buffer.
using LinearGeluCase = std::tuple<DType, ops::GeluApproximation, int64_t, bool, int64_t>;

class CudaLinearGelu : public Cuda, public ::testing::WithParamInterface<LinearGeluCase> {};

TEST_P(CudaLinearGelu, ForwardAndBackwardMatchTheCpu) {
  const auto [dtype, kind, out, with_bias, pre_offset] = GetParam();
  const Tensor x = random_tensor({2, 5, 24}, dtype, 60), w = random_tensor({out, 24}, dtype, 61);
  const Tensor bias = with_bias ? random_tensor({out}, DType::f32, 62) : Tensor();
  const Tensor pre = Tensor::empty({2, 5, out}, dtype), y = Tensor::empty({2, 5, out}, dtype);
  ops::linear_gelu_forward(x, w, bias, pre, y, kind);
  const Tensor pre_gpu = gpu_at(Tensor::zeros({2, 5, out}, dtype), pre_offset);
  const Tensor y_gpu = Tensor::empty({2, 5, out}, dtype, kGpu);
  ops::linear_gelu_forward(gpu(x), gpu(w), with_bias ? gpu(bias) : Tensor(), pre_gpu, y_gpu, kind);
  expect_match(pre_gpu, pre, tolerance(dtype, 1e-5), named("pre-activation", dtype));
  expect_match(y_gpu, y, tolerance(dtype, 1e-5), named("activation", dtype));

  // The down projection [24, out] reads y; its output gradient is dy.
  const Tensor down = random_tensor({24, out}, dtype, 63), dy = random_tensor({2, 5, 24}, dtype, 64);
  const Tensor d_pre = Tensor::empty(pre.shape(), dtype), d_pre_gpu = Tensor::empty(pre.shape(), dtype, kGpu);
  ops::linear_gelu_input_backward(dy, down, pre, d_pre, kind);
  ops::linear_gelu_input_backward(gpu(dy), gpu(down), pre_gpu, d_pre_gpu, kind);
  expect_match(d_pre_gpu, d_pre, tolerance(dtype, 1e-5), named("pre-activation gradient", dtype));
}

std::string linear_gelu_case_name(const ::testing::TestParamInfo<LinearGeluCase>& info) {
  const auto [dtype, kind, out, with_bias, pre_offset] = info.param;
  return fmt::format("{}_{}_{}_columns{}{}", dtype_name(dtype), kind == ops::GeluApproximation::tanh ? "tanh" : "exact",
                     out, with_bias ? "_bias" : "", pre_offset > 0 ? "_offset" : "");
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaLinearGelu,
                         ::testing::Combine(::testing::ValuesIn(kDtypes),
                                            ::testing::Values(ops::GeluApproximation::none,
                                                              ops::GeluApproximation::tanh),
                                            ::testing::Values(int64_t{32}, int64_t{36}), ::testing::Bool(),
                                            ::testing::Values(int64_t{0}, int64_t{1})),
                         linear_gelu_case_name);

// Vocabularies of fewer rows than the backward kernel's 64 buckets and of
// several rows a bucket; rows of 70 (two a block in the forward kernel) and
// 300 (longer than a block).
class CudaEmbedding : public Cuda, public ::testing::WithParamInterface<int64_t> {};

TEST_P(CudaEmbedding, WithLearnedAndPackedPositions) {
  const int64_t batch = 3, seq = 37, vocab = GetParam(), max_positions = 40;
  const Tensor tokens = ids(random_ids(batch * seq, int32_t(vocab), 13), {batch, seq});  // repeats
  std::vector<int32_t> packed;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seq; ++t) packed.push_back(int32_t(t % (5 + b)));
  const Tensor token_positions = ids(packed, {batch, seq});
  for (const int64_t dim : {70, 300}) {
    const Tensor table = random_tensor({vocab, dim}, DType::f32, 14);
    const Tensor positions = random_tensor({max_positions, dim}, DType::f32, 15);
    // The whole vocabulary, and a tensor-parallel part holding ids [3, vocab + 3).
    for (const ops::VocabPart part : {ops::VocabPart{}, ops::VocabPart{.first = 3, .classes = vocab + 3}}) {
      for (const DType dtype : kDtypes) {
        for (const bool pack : {false, true}) {
          const std::string what = fmt::format("embedding of {},", dim);
          const Tensor tp = pack ? token_positions : Tensor();
          const Tensor out = Tensor::empty({batch, seq, dim}, dtype), out_gpu = Tensor::empty(out.shape(), dtype, kGpu);
          ops::embedding_forward(tokens, table, positions, out, tp, part);
          ops::embedding_forward(gpu(tokens), gpu(table), gpu(positions), out_gpu, gpu(tp), part);
          expect_match(out_gpu, out, tolerance(dtype, 0), named(what + " forward", dtype));

          const Tensor d_out = random_tensor(out.shape(), dtype, 16);
          const Tensor d_table = random_tensor(table.shape(), DType::f32, 17);
          const Tensor d_pos = random_tensor(positions.shape(), DType::f32, 18);
          const Tensor d_table_gpu = gpu(d_table), d_pos_gpu = gpu(d_pos);
          ops::embedding_backward(tokens, d_out, d_table, d_pos, tp, part);
          // Positions may also stay on the host: the op copies them over.
          ops::embedding_backward(gpu(tokens), gpu(d_out), d_table_gpu, d_pos_gpu, tp, part);
          expect_match(d_table_gpu, d_table, 1e-5, named(what + " dtable", dtype));
          expect_match(d_pos_gpu, d_pos, 1e-5, named(what + " dpositions", dtype));
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, CudaEmbedding, ::testing::Values(11, 300));

TEST_F(Cuda, EmbeddingReportsTheFirstBadTokenAsTheCpuDoes) {
  std::vector<int32_t> v = random_ids(2 * 8, 10, 19);
  v[9] = 10;
  v[5] = -3;
  const Tensor tokens = ids(v, {2, 8}), table = random_tensor({10, 4}, DType::f32, 20);
  const Tensor out = Tensor::empty({2, 8, 4}, DType::f32);
  const std::string cpu = error_of([&] { ops::embedding_forward(tokens, table, Tensor(), out); });
  const std::string cuda = error_of([&] {
    ops::embedding_forward(gpu(tokens), gpu(table), Tensor(), Tensor::empty(out.shape(), DType::f32, kGpu));
  });
  EXPECT_NE(cpu, "");
  EXPECT_EQ(cuda, cpu);
}

// The backward pass over more rows than its listing blocks have threads (each
// thread lists a span of rows), half of them one id (one bucket far fuller
// than the rest), with ids below the table's part and learned positions
// without packing: every sum in row order, the CPU's to the bit.
TEST_F(Cuda, EmbeddingBackwardOverManyRowsAndOneFrequentId) {
  const int64_t batch = 4, seq = 300, vocab = 1000, dim = 40, first = 200;
  std::vector<int32_t> v = random_ids(batch * seq, int32_t(vocab), 21);
  for (size_t i = 0; i < v.size(); i += 2) v[i] = 777;
  const Tensor tokens = ids(v, {batch, seq});
  const ops::VocabPart part{.first = first, .classes = vocab};
  for (const DType dtype : kDtypes) {
    const Tensor d_out = random_tensor({batch, seq, dim}, dtype, 22);
    const Tensor d_table = random_tensor({vocab - first, dim}, DType::f32, 23);
    const Tensor d_pos = random_tensor({seq, dim}, DType::f32, 24);
    const Tensor d_table_gpu = gpu(d_table), d_pos_gpu = gpu(d_pos);
    ops::embedding_backward(tokens, d_out, d_table, d_pos, Tensor(), part);
    ops::embedding_backward(gpu(tokens), gpu(d_out), d_table_gpu, d_pos_gpu, Tensor(), part);
    expect_match(d_table_gpu, d_table, 0, named("dtable", dtype));
    expect_match(d_pos_gpu, d_pos, 0, named("dpositions", dtype));
  }
}

// Rows in 16-byte groups (200; 4104: more groups than a block has threads),
// single elements (203), and single elements because the weight and bias sit
// one element into their buffers (1000).
TEST_F(Cuda, NormsForwardAndBackward) {
  for (const int64_t dim : {200, 4104, 203, 1000}) {
    const int64_t rows = 67, skip = dim == 1000 ? 1 : 0;
    const Tensor w = random_tensor({dim}, DType::f32, 21, 2.0), w_gpu = gpu_at(w, skip);
    const Tensor bias = random_tensor({dim}, DType::f32, 22), bias_gpu = gpu_at(bias, skip);
    for (const DType dtype : kDtypes) {
      const Tensor x = random_tensor({rows, dim}, dtype, 23, 3.0), dy = random_tensor({rows, dim}, dtype, 24);
      const double tol = tolerance(dtype, 1e-4);
      {
        const Tensor y = Tensor::empty(x.shape(), dtype), rstd = Tensor::empty({rows}, DType::f32);
        const Tensor y_gpu = Tensor::empty(x.shape(), dtype, kGpu), rstd_gpu = Tensor::empty({rows}, DType::f32, kGpu);
        ops::rmsnorm_forward(x, w, y, rstd, 1e-5);
        ops::rmsnorm_forward(gpu(x), w_gpu, y_gpu, rstd_gpu, 1e-5);
        expect_match(y_gpu, y, tol, named("rmsnorm forward", dtype));
        expect_match(rstd_gpu, rstd, 1e-5, named("rmsnorm rstd", dtype));
        for (const bool frozen : {false, true}) {
          const Tensor dx = random_tensor(x.shape(), dtype, 25), dw = frozen ? Tensor() : random_tensor({dim}, DType::f32, 26);
          const Tensor dx_gpu = gpu(dx), dw_gpu = gpu(dw);
          ops::rmsnorm_backward(dy, x, w, rstd, dx, dw);
          ops::rmsnorm_backward(gpu(dy), gpu(x), w_gpu, rstd_gpu, dx_gpu, dw_gpu);
          expect_match(dx_gpu, dx, tol, named("rmsnorm dx", dtype));
          if (!frozen) expect_match(dw_gpu, dw, 1e-4, named("rmsnorm dweight", dtype));
        }
      }
      for (const bool with_bias : {false, true}) {
        const Tensor b = with_bias ? bias : Tensor(), b_gpu = with_bias ? bias_gpu : Tensor();
        const Tensor y = Tensor::empty(x.shape(), dtype), mean = Tensor::empty({rows}, DType::f32),
                     rstd = Tensor::empty({rows}, DType::f32);
        const Tensor y_gpu = Tensor::empty(x.shape(), dtype, kGpu), mean_gpu = Tensor::empty({rows}, DType::f32, kGpu),
                     rstd_gpu = Tensor::empty({rows}, DType::f32, kGpu);
        ops::layernorm_forward(x, w, b, y, mean, rstd, 1e-5);
        ops::layernorm_forward(gpu(x), w_gpu, b_gpu, y_gpu, mean_gpu, rstd_gpu, 1e-5);
        expect_match(y_gpu, y, tol, named("layernorm forward", dtype));
        expect_match(mean_gpu, mean, 1e-5, named("layernorm mean", dtype));
        expect_match(rstd_gpu, rstd, 1e-5, named("layernorm rstd", dtype));
        const Tensor dx = random_tensor(x.shape(), dtype, 27), dw = random_tensor({dim}, DType::f32, 28);
        const Tensor db = with_bias ? random_tensor({dim}, DType::f32, 29) : Tensor();
        const Tensor dx_gpu = gpu(dx), dw_gpu = gpu(dw), db_gpu = gpu(db);
        ops::layernorm_backward(dy, x, w, mean, rstd, dx, dw, db);
        ops::layernorm_backward(gpu(dy), gpu(x), w_gpu, mean_gpu, rstd_gpu, dx_gpu, dw_gpu, db_gpu);
        expect_match(dx_gpu, dx, tol, named("layernorm dx", dtype));
        expect_match(dw_gpu, dw, 1e-4, named("layernorm dweight", dtype));
        if (with_bias) expect_match(db_gpu, db, 1e-4, named("layernorm dbias", dtype));
      }
    }
  }
}

// The residual add before a norm (ops::ResidualAdd), in 16-byte groups (200,
// 4104), single elements (203), and single elements because the branch sits one
// element into its buffer (200, skip 1): the sum is exactly the CPU's, and the
// norm exactly the GPU's norm of the GPU's own add (its sum placed as the
// branch is, so it is read in the same groups, summed in the same order); in
// place (sum over x) too.
TEST_F(Cuda, NormsWithResidualAdd) {
  for (const auto& [dim, skip] : {std::pair<int64_t, int64_t>{200, 0}, {4104, 0}, {203, 0}, {200, 1}}) {
    const int64_t rows = 67;
    const Tensor w = gpu(random_tensor({dim}, DType::f32, 30, 2.0)), bias = gpu(random_tensor({dim}, DType::f32, 31));
    for (const DType dtype : kDtypes) {
      const Tensor x = random_tensor({rows, dim}, dtype, 32, 3.0), branch = random_tensor(x.shape(), dtype, 33);
      const Tensor x_gpu = gpu(x), branch_gpu = gpu_at(branch, skip);
      const Tensor sum = Tensor::empty(x.shape(), dtype), sum_gpu = gpu_at(Tensor::zeros(x.shape(), dtype), skip);
      ops::add(x, branch, sum);
      ops::add(x_gpu, branch_gpu, sum_gpu);
      for (const bool layernorm : {false, true}) {
        const auto norm = [&](const Tensor& input, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                              const ops::ResidualAdd& residual) {
          if (layernorm) ops::layernorm_forward(input, w, bias, y, mean, rstd, 1e-5, residual);
          else ops::rmsnorm_forward(input, w, y, rstd, 1e-5, residual);
        };
        const auto row_stats = [&] { return Tensor::empty({rows}, DType::f32, kGpu); };
        const Tensor y = Tensor::empty(x.shape(), dtype, kGpu), mean = row_stats(), rstd = row_stats();
        norm(sum_gpu, y, mean, rstd, {});
        for (const bool in_place : {false, true}) {
          const std::string what = fmt::format("{} dim {} skip {}{}", layernorm ? "add + layernorm" : "add + rmsnorm",
                                               dim, skip, in_place ? " in place" : "");
          const Tensor fused_sum = in_place ? x_gpu.clone() : Tensor::empty(x.shape(), dtype, kGpu);
          const Tensor fused_y = Tensor::empty(x.shape(), dtype, kGpu);
          const Tensor fused_mean = row_stats(), fused_rstd = row_stats();
          norm(in_place ? fused_sum : x_gpu, fused_y, fused_mean, fused_rstd, {.branch = branch_gpu, .sum = fused_sum});
          expect_match(fused_sum, sum, 0, named(what + " sum", dtype));
          expect_match(fused_y, y, 0, named(what, dtype));
          expect_match(fused_rstd, rstd, 0, named(what + " rstd", dtype));
          if (layernorm) expect_match(fused_mean, mean, 0, named(what + " mean", dtype));
        }
      }
    }
  }
}

// Head size 8 (eight rows a block of the kernel), 128 (four) and 1024 (pairs
// more than a block's threads); the rows hold 8 heads, 6 rotated.
TEST_F(Cuda, RopeForwardInverseOffsetAndPackedPositions) {
  const int64_t batch = 2, seq = 9, heads = 6;
  std::vector<int32_t> packed;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seq; ++t) packed.push_back(int32_t(t % (4 + b)));
  for (const int64_t hd : {8, 128, 1024}) {
    const Tensor cos = random_tensor({32, hd / 2}, DType::f32, 30), sin = random_tensor({32, hd / 2}, DType::f32, 31);
    for (const DType dtype : kDtypes) {
      for (const bool pack : {false, true}) {
        for (const bool inverse : {false, true}) {
          const Tensor tp = pack ? ids(packed, {batch, seq}) : Tensor();
          const Tensor x = random_tensor({batch, seq, 8 * hd}, dtype, 32), x_gpu = gpu(x);
          ops::rope_apply(x, cos, sin, heads, hd, pack ? 0 : 3, inverse, tp);
          ops::rope_apply(x_gpu, gpu(cos), gpu(sin), heads, hd, pack ? 0 : 3, inverse, gpu(tp));
          expect_match(x_gpu, x, tolerance(dtype, 1e-5), named(fmt::format("rope, head size {}", hd), dtype));
        }
      }
    }
  }
}

struct AttentionCase {
  int64_t batch, seq, heads, kv_heads, head_dim;
  bool alibi, packed;
};

using kernels::cuda::AttentionKernels;

// Sets which kernels bf16 attention tries first for one scope.
class KernelChoice {
 public:
  explicit KernelChoice(AttentionKernels kernels) : before_(kernels::cuda::attention_kernels()) {
    kernels::cuda::set_attention_kernels(kernels);
  }
  ~KernelChoice() { kernels::cuda::set_attention_kernels(before_); }

 private:
  AttentionKernels before_;
};

class CudaAttention : public Cuda, public ::testing::WithParamInterface<AttentionCase> {};

// Token positions of rows packed with samples of 17, 40, 40, ... tokens in row 0,
// other lengths in each other row (a kernel that read one row's sample starts for
// every row would show), on the CPU.
Tensor packed_positions(int64_t batch, int64_t seq) {
  std::vector<int32_t> p;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t start = 0;
    for (int64_t t = 0; t < seq; ++t) {
      if (t - start == (t < 60 ? 17 + 5 * b : 40 - 3 * b)) start = t;
      p.push_back(int32_t(t - start));
    }
  }
  return ids(p, {batch, seq});
}

TEST_P(CudaAttention, ForwardAndBackwardMatchTheCpu) {
  const AttentionCase c = GetParam();
  const ops::AttentionHeads heads{.n_heads = c.heads, .n_kv_heads = c.kv_heads, .head_dim = c.head_dim};
  const Shape qkv_shape{c.batch, c.seq, (c.heads + 2 * c.kv_heads) * c.head_dim};
  const Shape out_shape{c.batch, c.seq, c.heads * c.head_dim}, lse_shape{c.batch, c.heads, c.seq};
  Tensor slopes;
  if (c.alibi) {
    std::vector<float> s;
    for (int64_t h = 0; h < c.heads; ++h) s.push_back(0.5f / float(h + 1));
    slopes = Tensor::from(s, {c.heads});
  }
  const Tensor positions = c.packed ? packed_positions(c.batch, c.seq) : Tensor();
  // bf16 at head sizes 64 and 128 and lengths a multiple of 128 goes to cuDNN
  // unless hone's kernels are asked for: both are checked.
  for (const auto& [dtype, preferred] : {std::pair{DType::f32, AttentionKernels::hone},
                                         std::pair{DType::bf16, AttentionKernels::hone},
                                         std::pair{DType::bf16, AttentionKernels::cudnn}}) {
    const KernelChoice choice(preferred);
    SCOPED_TRACE(preferred == AttentionKernels::hone ? "hone's kernels" : "cuDNN first");
    const Tensor qkv = random_tensor(qkv_shape, dtype, 33, 1.5);
    const Tensor out = Tensor::empty(out_shape, dtype), lse = Tensor::empty(lse_shape, DType::f32);
    const Tensor out_gpu = Tensor::empty(out_shape, dtype, kGpu), lse_gpu = Tensor::empty(lse_shape, DType::f32, kGpu);
    ops::attention_forward(qkv, out, lse, slopes, heads, positions);
    ops::attention_forward(gpu(qkv), out_gpu, lse_gpu, gpu(slopes), heads, gpu(positions));
    expect_match(out_gpu, out, tolerance(dtype, 1e-4), named("attention forward", dtype));
    // In bf16 the CPU sums the probabilities as rounded for P·V, relative to the
    // row's final maximum; the GPU sums them unrounded, tile by tile: up to
    // 2^-9 of a sum apart, about 1e-3 in its logarithm.
    expect_match(lse_gpu, lse, tolerance(dtype, 1e-5, 2e-3), named("attention lse", dtype));

    const Tensor d_out = random_tensor(out_shape, dtype, 34);
    const Tensor d_qkv = Tensor::empty(qkv_shape, dtype), d_qkv_gpu = Tensor::empty(qkv_shape, dtype, kGpu);
    ops::attention_backward(d_out, qkv, out, lse, slopes, d_qkv, heads, positions);
    // The GPU's own forward results, as training uses them.
    ops::attention_backward(gpu(d_out), gpu(qkv), out_gpu, lse_gpu, gpu(slopes), d_qkv_gpu, heads, gpu(positions));
    expect_match(d_qkv_gpu, d_qkv, tolerance(dtype, 1e-4, 2e-2), named("attention backward", dtype));
  }
}

// Tiles end mid-way and span several 32-wide (CUDA cores) and 64-wide (tensor
// cores: bf16 at head_dim 64 and 128) tiles; MHA, GQA, MQA; ALiBi; head
// dimensions 4 to 256 (each of the kernels' register layouts); packed samples;
// lengths cuDNN takes (multiples of 128).
INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttention,
                         ::testing::Values(AttentionCase{2, 70, 4, 2, 8, false, false},
                                           AttentionCase{1, 130, 2, 2, 16, true, false},
                                           AttentionCase{2, 9, 4, 1, 4, false, false},
                                           AttentionCase{1, 64, 4, 2, 8, true, false},
                                           AttentionCase{1, 100, 4, 2, 64, false, false},
                                           AttentionCase{2, 80, 2, 1, 128, true, false},
                                           AttentionCase{1, 96, 2, 2, 48, false, false},
                                           AttentionCase{2, 150, 4, 2, 64, false, true},
                                           AttentionCase{1, 300, 4, 1, 128, true, true},
                                           AttentionCase{1, 200, 8, 8, 256, false, false},
                                           AttentionCase{2, 256, 4, 2, 64, false, false},
                                           AttentionCase{1, 128, 2, 1, 128, false, false},
                                           AttentionCase{1, 256, 4, 2, 128, true, false},
                                           AttentionCase{2, 256, 4, 2, 64, false, true}));

// cuDNN's fused attention takes the bf16 calls it should (the test above would
// pass just as well if it silently took none), and its outputs and hone's are
// interchangeable: hone's backward pass after cuDNN's forward pass and cuDNN's
// after hone's match the CPU. MHA, GQA and MQA, with and without ALiBi, with
// and without packed samples.
TEST_F(Cuda, CudnnAttentionTakesItsCallsAndMixesWithHonesKernels) {
  if (!kernels::cuda::cudnn_attention_built()) GTEST_SKIP() << "hone was built without cuDNN's headers";
  const KernelChoice cudnn_first(AttentionKernels::cudnn);  // whatever HONE_CUDA_ATTENTION says
  struct Case {
    int64_t batch, seq, heads, kv_heads, head_dim;
    bool alibi, packed;
  };
  for (const Case c : {Case{2, 128, 4, 2, 64, false, false}, Case{1, 384, 4, 1, 128, false, false},
                       Case{2, 256, 8, 8, 128, false, false}, Case{1, 1024, 8, 2, 64, false, false},
                       Case{2, 256, 4, 4, 64, true, false}, Case{1, 512, 8, 2, 128, true, false},
                       Case{2, 384, 8, 2, 128, false, true}, Case{1, 256, 4, 4, 64, true, true}}) {
    SCOPED_TRACE(fmt::format("batch {} seq {} heads {}/{} head_dim {}{}{}", c.batch, c.seq, c.heads, c.kv_heads,
                             c.head_dim, c.alibi ? " ALiBi" : "", c.packed ? " packed" : ""));
    const ops::AttentionHeads heads{.n_heads = c.heads, .n_kv_heads = c.kv_heads, .head_dim = c.head_dim};
    const Tensor positions = c.packed ? packed_positions(c.batch, c.seq) : Tensor(), positions_gpu = gpu(positions);
    auto dims = attention_dims(c.batch, c.seq, c.heads, c.kv_heads, c.head_dim);
    if (c.packed) dims.positions = positions_gpu.data<int32_t>();
    const Shape qkv_shape{c.batch, c.seq, (c.heads + 2 * c.kv_heads) * c.head_dim};
    const Shape out_shape{c.batch, c.seq, c.heads * c.head_dim}, lse_shape{c.batch, c.heads, c.seq};
    const Tensor qkv = random_tensor(qkv_shape, DType::bf16, 35, 1.5), d_out = random_tensor(out_shape, DType::bf16, 36);
    const Tensor out = Tensor::empty(out_shape, DType::bf16), lse = Tensor::empty(lse_shape, DType::f32);
    const Tensor d_qkv = Tensor::empty(qkv_shape, DType::bf16);
    Tensor slopes;  // MPT's: 2^(-8·(h + 1) / heads)
    if (c.alibi) {
      std::vector<float> s;
      for (int64_t h = 0; h < c.heads; ++h) s.push_back(std::exp2(-8.0f * float(h + 1) / float(c.heads)));
      slopes = Tensor::from(s, {c.heads});
    }
    ops::attention_forward(qkv, out, lse, slopes, heads, positions);
    ops::attention_backward(d_out, qkv, out, lse, slopes, d_qkv, heads, positions);

    const Tensor qkv_gpu = gpu(qkv), d_out_gpu = gpu(d_out), slopes_gpu = gpu(slopes);
    const float* slopes_data = c.alibi ? slopes_gpu.data<float>() : nullptr;
    const Tensor out_cudnn = Tensor::empty(out_shape, DType::bf16, kGpu), lse_cudnn = Tensor::empty(lse_shape, DType::f32, kGpu);
    ASSERT_TRUE(kernels::cuda::cudnn_attention_forward(qkv_gpu.data<bf16>(), out_cudnn.data<bf16>(),
                                                       lse_cudnn.data<float>(), slopes_data, dims))
        << "cuDNN did not take the forward pass (its notice above says why)";
    expect_match(out_cudnn, out, 1e-2, "cuDNN forward");
    expect_match(lse_cudnn, lse, 2e-3, "cuDNN lse");

    // hone's kernels: their forward pass, and their backward pass after cuDNN's forward.
    const Tensor out_hone = Tensor::empty(out_shape, DType::bf16, kGpu), lse_hone = Tensor::empty(lse_shape, DType::f32, kGpu);
    const Tensor d_qkv_hone = Tensor::empty(qkv_shape, DType::bf16, kGpu);
    {
      const KernelChoice hone_kernels(AttentionKernels::hone);
      ops::attention_forward(qkv_gpu, out_hone, lse_hone, slopes_gpu, heads, positions_gpu);
      ops::attention_backward(d_out_gpu, qkv_gpu, out_cudnn, lse_cudnn, slopes_gpu, d_qkv_hone, heads, positions_gpu);
    }
    expect_match(d_qkv_hone, d_qkv, 2e-2, "hone's backward after cuDNN's forward");
    const Tensor d_qkv_cudnn = Tensor::empty(qkv_shape, DType::bf16, kGpu);
    ASSERT_TRUE(kernels::cuda::cudnn_attention_backward(d_out_gpu.data<bf16>(), qkv_gpu.data<bf16>(),
                                                        out_hone.data<bf16>(), lse_hone.data<float>(), slopes_data,
                                                        d_qkv_cudnn.data<bf16>(), dims))
        << "cuDNN did not take the backward pass (its notice above says why)";
    expect_match(d_qkv_cudnn, d_qkv, 2e-2, "cuDNN backward after hone's forward");
  }
  // It takes ALiBi and packed samples, and leaves to hone's kernels other head
  // sizes and lengths that are not multiples of 128 (each a change to a call it
  // takes).
  const auto taken = attention_dims(1, 128, 2, 2, 64);
  const Tensor positions = Tensor::zeros({1, 128}, DType::i32, kGpu);
  auto head_48 = taken, packed = taken, length_100 = taken;
  head_48.head_dim = 48;
  packed.positions = positions.data<int32_t>();
  length_100.seq = 100;
  const Tensor qkv = Tensor::zeros({1, 128, 6 * 64}, DType::bf16, kGpu), out = Tensor::zeros({1, 128, 2 * 64}, DType::bf16, kGpu);
  const Tensor lse = Tensor::zeros({1, 2, 128}, DType::f32, kGpu), slopes = Tensor::zeros({2}, DType::f32, kGpu);
  const auto forward = [&](const kernels::cpu::AttentionDims& dims, const float* alibi) {
    return kernels::cuda::cudnn_attention_forward(qkv.data<bf16>(), out.data<bf16>(), lse.data<float>(), alibi, dims);
  };
  EXPECT_TRUE(forward(taken, nullptr));
  EXPECT_TRUE(forward(taken, slopes.data<float>()));
  EXPECT_TRUE(forward(packed, nullptr));
  EXPECT_FALSE(forward(head_48, nullptr));
  EXPECT_FALSE(forward(length_100, nullptr));
}

TEST_F(Cuda, AttentionDecodeMatchesTheCpu) {
  const int64_t rows = 3, slots = 4, capacity = 50, H = 4, KV = 2;
  for (const int64_t hd : {8, 64, 128}) {
    const ops::AttentionHeads heads{.n_heads = H, .n_kv_heads = KV, .head_dim = hd};
    const std::vector<int64_t> slot_of = {2, 0, 3}, position_of = {0, 36, 49};
    const ops::DecodeRows step(slot_of, position_of, slots, capacity, Device::cpu());
    const ops::DecodeRows step_gpu(slot_of, position_of, slots, capacity, kGpu);
    const Tensor slopes = Tensor::from(std::vector<float>{0.5f, 0.25f, 0.125f, 0.0625f}, {H});
    for (const DType dtype : kDtypes) {
      for (const bool alibi : {false, true}) {
        const Tensor q = random_tensor({rows, (H + 2 * KV) * hd}, dtype, 35);
        const Tensor k = random_tensor({slots, capacity, KV * hd}, dtype, 36);
        const Tensor v = random_tensor({slots, capacity, KV * hd}, dtype, 37);
        const Tensor s = alibi ? slopes : Tensor();
        const Tensor out = Tensor::empty({rows, H * hd}, dtype), out_gpu = Tensor::empty({rows, H * hd}, dtype, kGpu);
        ops::attention_decode(q, k, v, step, s, out, heads);
        ops::attention_decode(gpu(q), gpu(k), gpu(v), step_gpu, gpu(s), out_gpu, heads);
        expect_match(out_gpu, out, tolerance(dtype, 1e-5), named("attention decode", dtype));
      }
    }
  }
}

TEST_F(Cuda, KvCacheAppendMatchesTheCpu) {
  const int64_t rows = 3, slots = 4, capacity = 50, H = 4, KV = 2;
  const std::vector<int64_t> slot_of = {2, 0, 3}, position_of = {0, 37, 49};
  const ops::DecodeRows step(slot_of, position_of, slots, capacity, Device::cpu());
  const ops::DecodeRows step_gpu(slot_of, position_of, slots, capacity, kGpu);
  for (const int64_t hd : {8, 128, 256}) {  // key rows of 16 to 512: a block of rows, one, one in two steps
    const ops::AttentionHeads heads{.n_heads = H, .n_kv_heads = KV, .head_dim = hd};
    const Tensor cos = random_tensor({capacity, hd / 2}, DType::f32, 40);
    const Tensor sin = random_tensor({capacity, hd / 2}, DType::f32, 41);
    for (const DType dtype : kDtypes) {
      for (const bool rotary : {false, true}) {
        const Tensor qkv = random_tensor({rows, (H + 2 * KV) * hd}, dtype, 42);
        const Tensor k = random_tensor({slots, capacity, KV * hd}, dtype, 43), v = k.clone();
        const Tensor qkv_gpu = gpu(qkv), k_gpu = gpu(k), v_gpu = gpu(v);
        const Tensor c = rotary ? cos : Tensor(), s = rotary ? sin : Tensor();
        ops::kv_cache_append(qkv, c, s, step, k, v, heads);
        ops::kv_cache_append(qkv_gpu, gpu(c), gpu(s), step_gpu, k_gpu, v_gpu, heads);
        const double tol = tolerance(dtype, 1e-6);
        expect_match(qkv_gpu, qkv, tol, named(rotary ? "kv cache append, rotated qkv" : "kv cache append, qkv", dtype));
        expect_match(k_gpu, k, tol, named("kv cache append, keys", dtype));
        expect_match(v_gpu, v, tol, named("kv cache append, values", dtype));
      }
    }
  }
}

// Widths and lengths that take the kernels' 16-byte groups (32, 2056, 1000)
// and single elements (33, 601, 999); SwiGLU rows within a block's threads (32,
// 33) and longer (601, 2056).
TEST_F(Cuda, ActivationsForwardAndBackward) {
  for (const DType dtype : kDtypes) {
    const double tol = tolerance(dtype, 1e-5);
    for (const int64_t hidden : {33, 32, 601, 2056}) {
      const std::string what = fmt::format("swiglu, hidden {},", hidden);
      const Tensor gate_up = random_tensor({7, 2 * hidden}, dtype, 38, 4.0);
      const Tensor d_out = random_tensor({7, hidden}, dtype, 39);
      const Tensor out = Tensor::empty({7, hidden}, dtype), out_gpu = Tensor::empty({7, hidden}, dtype, kGpu);
      ops::swiglu_forward(gate_up, out);
      ops::swiglu_forward(gpu(gate_up), out_gpu);
      expect_match(out_gpu, out, tol, named(what + " forward", dtype));
      const Tensor d_gu = Tensor::empty(gate_up.shape(), dtype);
      const Tensor d_gu_gpu = Tensor::empty(gate_up.shape(), dtype, kGpu);
      ops::swiglu_backward(d_out, gate_up, d_gu);
      ops::swiglu_backward(gpu(d_out), gpu(gate_up), d_gu_gpu);
      expect_match(d_gu_gpu, d_gu, tol, named(what + " backward", dtype));
      const Tensor in_place = gpu(gate_up);  // the model writes the gradient over the input
      ops::swiglu_backward(gpu(d_out), in_place, in_place);
      EXPECT_EQ(relative_error(in_place, d_gu_gpu), 0.0) << named(what + " backward in place", dtype);
    }

    for (const auto kind : {ops::GeluApproximation::none, ops::GeluApproximation::tanh}) {
      for (const int64_t n : {1000, 999}) {
        const std::string what = fmt::format("gelu of {},", n);
        const Tensor x = random_tensor({n}, dtype, 40, 5.0), dy = random_tensor({n}, dtype, 41);
        const Tensor y = Tensor::empty({n}, dtype), y_gpu = Tensor::empty({n}, dtype, kGpu);
        ops::gelu_forward(x, y, kind);
        ops::gelu_forward(gpu(x), y_gpu, kind);
        expect_match(y_gpu, y, tol, named(what + " forward", dtype));
        const Tensor dx = Tensor::empty({n}, dtype), dx_gpu = Tensor::empty({n}, dtype, kGpu);
        ops::gelu_backward(dy, x, dx, kind);
        ops::gelu_backward(gpu(dy), gpu(x), dx_gpu, kind);
        expect_match(dx_gpu, dx, tol, named(what + " backward", dtype));
        const Tensor in_place = gpu(x);
        ops::gelu_backward(gpu(dy), in_place, in_place, kind);
        EXPECT_EQ(relative_error(in_place, dx_gpu), 0.0) << named(what + " backward in place", dtype);
      }
    }
  }
}

// GPT-2's vocabulary (rows longer than a block) and one shorter than a block
// (threads that hold no class), element by element; and vocabularies the
// kernels read in 16-byte groups (a multiple of 8: 50264, 40).
class CudaCrossEntropy : public Cuda, public ::testing::WithParamInterface<int64_t> {};

TEST_P(CudaCrossEntropy, ForwardBackwardAndTotals) {
  const int64_t rows = 13, vocab = GetParam();
  std::vector<int32_t> t = random_ids(rows, int32_t(vocab), 42);
  t[2] = t[7] = ops::kIgnoreIndex;
  const Tensor targets = ids(t, {rows});
  // Row weights (DPO's), on the part's backward pass.
  const Tensor row_weights = random_tensor({rows}, DType::f32, 46, 2.0);
  // The whole vocabulary, and a tensor-parallel part holding classes [7, vocab + 7).
  for (const ops::VocabPart part : {ops::VocabPart{}, ops::VocabPart{.first = 7, .classes = vocab + 7}}) {
    const Tensor weights = part.first > 0 ? row_weights : Tensor();
    for (const DType dtype : kDtypes) {
      const Tensor logits = random_tensor({rows, vocab}, dtype, 43, 6.0), logits_gpu = gpu(logits);
      const Tensor losses = Tensor::empty({rows}, DType::f32), lse = Tensor::empty({rows}, DType::f32);
      const Tensor losses_gpu = Tensor::empty({rows}, DType::f32, kGpu), lse_gpu = Tensor::empty({rows}, DType::f32, kGpu);
      const ops::LossSum cpu = ops::cross_entropy_forward(logits, targets, losses, lse, part);
      const ops::LossSum cuda = ops::cross_entropy_forward(logits_gpu, gpu(targets), losses_gpu, lse_gpu, part);
      EXPECT_EQ(cuda.tokens, cpu.tokens);
      EXPECT_NEAR(cuda.sum, cpu.sum, 1e-5 * std::abs(cpu.sum)) << dtype_name(dtype);
      expect_match(losses_gpu, losses, 1e-5, named("cross-entropy losses", dtype));
      expect_match(lse_gpu, lse, 1e-5, named("cross-entropy lse", dtype));
      ops::cross_entropy_backward(logits, targets, lse, 0.25, part, weights);
      ops::cross_entropy_backward(logits_gpu, gpu(targets), lse_gpu, 0.25, part, gpu(weights));
      expect_match(logits_gpu, logits, tolerance(dtype, 1e-5), named("cross-entropy backward", dtype));
    }
  }
  // Training's one-call variant (whole vocabulary) against the CPU's fused pass.
  for (const DType dtype : kDtypes) {
    const Tensor logits = random_tensor({rows, vocab}, dtype, 45, 6.0), logits_gpu = gpu(logits);
    const Tensor losses = Tensor::empty({rows}, DType::f32), lse = Tensor::empty({rows}, DType::f32);
    const Tensor losses_gpu = Tensor::empty({rows}, DType::f32, kGpu), lse_gpu = Tensor::empty({rows}, DType::f32, kGpu);
    const ops::LossSum cpu = ops::cross_entropy_forward_backward(logits, targets, losses, lse, 0.25);
    const ops::LossSum cuda = ops::cross_entropy_forward_backward(logits_gpu, gpu(targets), losses_gpu, lse_gpu, 0.25);
    EXPECT_EQ(cuda.tokens, cpu.tokens);
    EXPECT_NEAR(cuda.sum, cpu.sum, 1e-5 * std::abs(cpu.sum)) << dtype_name(dtype);
    expect_match(logits_gpu, logits, tolerance(dtype, 1e-5), named("cross-entropy forward-backward", dtype));
  }
}

// Rows padded to 16 bytes (the output head's logits on a GPU: 50257 classes
// read as whole 16-byte groups): the CPU's packed losses and gradients, the
// padding's gradient 0.
TEST_P(CudaCrossEntropy, PaddedRowsMatchThePackedCpu) {
  const int64_t rows = 13, vocab = GetParam();
  std::vector<int32_t> t = random_ids(rows, int32_t(vocab), 47);
  t[4] = ops::kIgnoreIndex;
  const Tensor targets = ids(t, {rows});
  const ops::VocabPart padded{.columns = vocab};
  for (const DType dtype : kDtypes) {
    const int64_t stride = ops::padded_row_length(vocab, dtype);
    auto per_row = [&](Device device) { return Tensor::empty({rows}, DType::f32, device); };
    const Tensor losses = per_row(Device::cpu()), lse = per_row(Device::cpu());
    const Tensor losses_gpu = per_row(kGpu), lse_gpu = per_row(kGpu);
    const Tensor logits = random_tensor({rows, vocab}, dtype, 48, 6.0);
    const Tensor logits_gpu = gpu(with_padded_rows(logits, stride));
    const ops::LossSum cpu = ops::cross_entropy_forward(logits, targets, losses, lse);
    const ops::LossSum cuda = ops::cross_entropy_forward(logits_gpu, gpu(targets), losses_gpu, lse_gpu, padded);
    EXPECT_EQ(cuda.tokens, cpu.tokens);
    EXPECT_NEAR(cuda.sum, cpu.sum, 1e-5 * std::abs(cpu.sum)) << dtype_name(dtype);
    expect_match(lse_gpu, lse, 1e-5, named("padded cross-entropy lse", dtype));
    ops::cross_entropy_backward(logits, targets, lse, 0.25);
    ops::cross_entropy_backward(logits_gpu, gpu(targets), lse_gpu, 0.25, padded);
    expect_close(packed_columns(logits_gpu, vocab), logits, tolerance(dtype, 1e-5),
                 named("padded cross-entropy backward", dtype));
    EXPECT_EQ(padding_of(logits_gpu, vocab), std::vector<double>(size_t(rows * (stride - vocab)), 0.0));

    const Tensor fused = random_tensor({rows, vocab}, dtype, 49, 6.0), fused_gpu = gpu(with_padded_rows(fused, stride));
    ops::cross_entropy_forward_backward(fused, targets, losses, lse, 0.25);
    ops::cross_entropy_forward_backward(fused_gpu, gpu(targets), losses_gpu, lse_gpu, 0.25, padded);
    expect_match(losses_gpu, losses, 1e-5, named("padded cross-entropy forward-backward losses", dtype));
    expect_close(packed_columns(fused_gpu, vocab), fused, tolerance(dtype, 1e-5),
                 named("padded cross-entropy forward-backward", dtype));
    EXPECT_EQ(padding_of(fused_gpu, vocab), std::vector<double>(size_t(rows * (stride - vocab)), 0.0));
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, CudaCrossEntropy, ::testing::Values(50257, 37, 50264, 40));

// Training's one call holds a row in shared memory where it fits (GPT-2's
// 50257 classes, packed and padded, in bf16 and f32; 60000 in bf16) and runs
// the two kernels where it does not (60000 f32: 240 KB): the forward call then
// the backward call's results, bit for bit, either way.
TEST_F(Cuda, CrossEntropyInOneCallIsTheTwoCallsBitForBit) {
  const int64_t rows = 9;
  for (const int64_t vocab : {50257, 60000}) {
    std::vector<int32_t> t = random_ids(rows, int32_t(vocab), 50);
    t[3] = ops::kIgnoreIndex;
    const Tensor targets = gpu(ids(t, {rows}));
    for (const DType dtype : kDtypes) {
      for (const bool padded : {false, true}) {
        const int64_t stride = padded ? ops::padded_row_length(vocab, dtype) : vocab;
        const std::string what = fmt::format("vocab {}{}", vocab, padded ? ", padded rows" : "");
        const ops::VocabPart part{.columns = vocab};
        const Tensor logits = gpu(with_padded_rows(random_tensor({rows, vocab}, dtype, 51, 6.0), stride));
        const Tensor two = logits.clone(), one = logits.clone();
        auto per_row = [] { return Tensor::empty({rows}, DType::f32, kGpu); };
        const Tensor losses_two = per_row(), lse_two = per_row(), losses_one = per_row(), lse_one = per_row();
        const ops::LossSum sum_two = ops::cross_entropy_forward(two, targets, losses_two, lse_two, part);
        ops::cross_entropy_backward(two, targets, lse_two, 0.25, part);
        const ops::LossSum sum_one = ops::cross_entropy_forward_backward(one, targets, losses_one, lse_one, 0.25, part);
        EXPECT_EQ(sum_one.sum, sum_two.sum) << what;
        EXPECT_EQ(sum_one.tokens, sum_two.tokens) << what;
        expect_match(losses_one, losses_two, 0, named(what + " losses", dtype));
        expect_match(lse_one, lse_two, 0, named(what + " lse", dtype));
        expect_match(one, two, 0, named(what + " gradient", dtype));
      }
    }
  }
}

TEST_F(Cuda, CrossEntropyReportsTheFirstBadTargetAsTheCpuDoes) {
  const Tensor logits = random_tensor({6, 20}, DType::f32, 44);
  const Tensor targets = ids({3, ops::kIgnoreIndex, 25, 1, -7, 2}, {6});
  const Tensor losses = Tensor::empty({6}, DType::f32), lse = Tensor::empty({6}, DType::f32);
  const std::string cpu = error_of([&] { ops::cross_entropy_forward(logits, targets, losses, lse); });
  const std::string cuda = error_of([&] {
    ops::cross_entropy_forward(gpu(logits), gpu(targets), gpu(losses), gpu(lse));
  });
  EXPECT_NE(cpu, "");
  EXPECT_EQ(cuda, cpu);
  const std::string cuda_with_gradient = error_of([&] {
    ops::cross_entropy_forward_backward(gpu(logits), gpu(targets), gpu(losses), gpu(lse), 0.5);
  });
  EXPECT_EQ(cuda_with_gradient, error_of([&] { ops::cross_entropy_forward_backward(logits, targets, losses, lse, 0.5); }));
  EXPECT_NE(cuda_with_gradient.find("target 25 at row 2"), std::string::npos) << cuda_with_gradient;
}

TEST_F(Cuda, ElementWiseOps) {
  for (const DType dtype : kDtypes) {
    const double tol = tolerance(dtype, 1e-6);
    for (const int64_t n : {1024, 1001}) {  // in 16-byte groups and element by element
      const Tensor a = random_tensor({n}, dtype, 45), b = random_tensor({n}, dtype, 46);
      const Tensor out = Tensor::empty({n}, dtype), out_gpu = Tensor::empty({n}, dtype, kGpu);
      ops::add(a, b, out);
      ops::add(gpu(a), gpu(b), out_gpu);
      expect_match(out_gpu, out, tol, named(fmt::format("add of {}", n), dtype));
      ops::scale_(out, 0.3);
      ops::scale_(out_gpu, 0.3);
      expect_match(out_gpu, out, tol, named(fmt::format("scale of {}", n), dtype));
    }
    const Tensor a = random_tensor({1001}, dtype, 45);

    // The same Philox masks as the CPU: identical, not merely close.
    const Tensor dropped = Tensor::empty({1001}, dtype), dropped_gpu = Tensor::empty({1001}, dtype, kGpu);
    ops::dropout(a, dropped, 0.3, 7, 9);
    ops::dropout(gpu(a), dropped_gpu, 0.3, 7, 9);
    EXPECT_EQ(relative_error(dropped_gpu, dropped), 0.0) << named("dropout", dtype);
    const Tensor part = Tensor::empty({37}, dtype, kGpu);  // from inside a Philox block of 4
    ops::dropout(gpu(a).slice(5, {37}), part, 0.3, 7, 9, 5);
    EXPECT_EQ(relative_error(part, dropped.slice(5, {37})), 0.0) << named("dropout of a part", dtype);

    for (const int64_t cols : {7, 300}) {  // many rows a block, and rows longer than a block
      const std::string what = fmt::format("{} columns", cols);
      const Tensor dst = random_tensor({6, cols + 13}, dtype, 47), dst_gpu = gpu(dst);
      const Tensor src = random_tensor({6, cols}, dtype, 48);
      ops::add_columns(dst, 5, src, 0.5);
      ops::add_columns(dst_gpu, 5, gpu(src), 0.5);
      expect_match(dst_gpu, dst, tol, named("add_columns, " + what, dtype));
      const Tensor block = Tensor::empty({6, cols}, dtype), block_gpu = Tensor::empty({6, cols}, dtype, kGpu);
      ops::copy_columns(dst, 9, block, 2.0);
      ops::copy_columns(dst_gpu, 9, block_gpu, 2.0);
      expect_match(block_gpu, block, tol, named("copy_columns, " + what, dtype));

      // DoRA's rescaling of the block and its backward (scales, norms and magnitude gradients in f32).
      const Tensor scale = random_tensor({cols}, DType::f32, 51), inv_norm = random_tensor({cols}, DType::f32, 52);
      const Tensor bias = random_tensor({cols + 13}, DType::f32, 53);
      const Tensor z = Tensor::empty({6, cols}, dtype), z_gpu = Tensor::empty({6, cols}, dtype, kGpu);
      ops::dora_scale_forward(dst, 9, scale, bias, z);
      ops::dora_scale_forward(dst_gpu, 9, gpu(scale), gpu(bias), z_gpu);
      expect_match(dst_gpu, dst, tol, named("dora_scale_forward, " + what, dtype));
      expect_match(z_gpu, z, tol, named("dora_scale_forward's kept block, " + what, dtype));
      const Tensor dy = random_tensor({6, cols + 13}, dtype, 54), dy_gpu = gpu(dy);
      const Tensor dm = random_tensor({cols}, DType::f32, 55), dm_gpu = gpu(dm);
      ops::dora_scale_backward(dy, 9, z, scale, inv_norm, dm);
      ops::dora_scale_backward(dy_gpu, 9, z_gpu, gpu(scale), gpu(inv_norm), dm_gpu);
      expect_match(dy_gpu, dy, tol, named("dora_scale_backward's gradient, " + what, dtype));
      expect_match(dm_gpu, dm, tolerance(dtype, 1e-5), named("dora_scale_backward's magnitudes, " + what, dtype));
    }

    {  // DoRA's row norms (rows longer than a block), and rows rescaled
      const Tensor w = random_tensor({7, 700}, dtype, 56), magnitude = random_tensor({7}, DType::f32, 57);
      const Tensor a = random_tensor({3, 700}, DType::f32, 58), b = random_tensor({7, 3}, DType::f32, 59);
      const Tensor scale = Tensor::empty({7}, DType::f32), inv_norm = Tensor::empty({7}, DType::f32);
      const Tensor scale_gpu = Tensor::empty({7}, DType::f32, kGpu), inv_norm_gpu = Tensor::empty({7}, DType::f32, kGpu);
      ops::dora_norms(w, a, b, 2.0, magnitude, scale, inv_norm);
      ops::dora_norms(gpu(w), gpu(a), gpu(b), 2.0, gpu(magnitude), scale_gpu, inv_norm_gpu);
      expect_match(scale_gpu, scale, 1e-6, named("dora_norms' scales", dtype));
      expect_match(inv_norm_gpu, inv_norm, 1e-6, named("dora_norms' inverse norms", dtype));
      const Tensor rows = a.clone(), rows_gpu = gpu(a);
      ops::scale_rows(rows, scale.slice(0, {3}));
      ops::scale_rows(rows_gpu, scale_gpu.slice(0, {3}));
      expect_match(rows_gpu, rows, 1e-6, "scale_rows");
    }

    for (const int64_t n : {300001, 300000}) {  // element by element and in 16-byte groups
      const Tensor big = random_tensor({n}, dtype, 49);
      // The CPU adds float squares in blocks of 256, the GPU double ones: about 3e-9 apart.
      const double cpu = ops::sum_squares(big);
      EXPECT_NEAR(ops::sum_squares(gpu(big)), cpu, 1e-7 * cpu) << named(fmt::format("sum of squares of {}", n), dtype);
    }
  }
}

// f16 has no host accessor: compare the bits.
std::vector<uint16_t> bits_of(const Tensor& t) { return t.view_bytes(0, t.shape(), DType::u16).to_vector<uint16_t>(); }

TEST_F(Cuda, CastsAreBitExactWithTheCpu) {
  std::vector<float> values;
  Generator g(50);
  for (int i = 0; i < 4000; ++i) values.push_back(float((g.next_double() - 0.5) * std::pow(2.0, double(i % 60) - 30)));
  for (float special : {0.0f, -0.0f, 65504.0f, 65520.0f, 1e-8f, 6e-8f, 3e-5f, INFINITY, -INFINITY}) values.push_back(special);
  const Tensor f32 = Tensor::from(values, {int64_t(values.size())});
  for (const DType to : {DType::bf16, DType::f16}) {
    const Tensor cpu = Tensor::empty(f32.shape(), to), cuda = Tensor::empty(f32.shape(), to, kGpu);
    ops::cast(f32, cpu);
    ops::cast(gpu(f32), cuda);
    EXPECT_EQ(bits_of(cuda), bits_of(cpu)) << "f32 -> " << dtype_name(to);
    // From host memory (a memory-mapped file) into a device tensor.
    const Tensor from_host = Tensor::empty(f32.shape(), to, kGpu);
    ops::cast(f32.raw(), DType::f32, from_host);
    EXPECT_EQ(bits_of(from_host), bits_of(cpu)) << "host f32 -> " << dtype_name(to);
    const Tensor back = Tensor::empty(f32.shape(), DType::f32), back_gpu = Tensor::empty(f32.shape(), DType::f32, kGpu);
    ops::cast(cpu, back);
    ops::cast(cuda, back_gpu);
    EXPECT_EQ(bits_of(back_gpu.view_bytes(0, {2 * f32.numel()}, DType::bf16)),
              bits_of(back.view_bytes(0, {2 * f32.numel()}, DType::bf16)))
        << dtype_name(to) << " -> f32";
  }
  const Tensor f64 = Tensor::empty(f32.shape(), DType::f64, kGpu), round_trip = Tensor::empty(f32.shape(), DType::f32, kGpu);
  ops::cast(gpu(f32), f64);
  ops::cast(f64, round_trip);
  EXPECT_EQ(relative_error(f64, f32), 0.0);
  EXPECT_EQ(relative_error(round_trip, f32), 0.0);
}

// 5000 elements in groups of 4; 5003 with 3 left over; 4999 from one element
// into every buffer (all single elements); with and without the bf16 copy.
TEST_F(Cuda, AdamWWithComputeCopy) {
  for (const auto& [n, skip] : {std::pair<int64_t, int64_t>{5000, 0}, {5003, 0}, {4999, 1}}) {
    const Tensor param = random_tensor({n}, DType::f32, 51), grad = random_tensor({n}, DType::f32, 52);
    const Tensor m = random_tensor({n}, DType::f32, 53, 0.1);
    std::vector<float> second(static_cast<size_t>(n));  // second moments are non-negative
    Generator(54).uniform(std::span<float>(second), 0.0, 0.01);
    const Tensor v = Tensor::from(second, {n});
    for (const bool with_copy : {true, false}) {
      const std::string what = fmt::format("adamw of {} from element {}{}:", n, skip, with_copy ? " with a copy" : "");
      const Tensor p_cpu = param.clone(), m_cpu = m.clone(), v_cpu = v.clone();
      const Tensor p_gpu = gpu_at(param, skip), g_gpu = gpu_at(grad, skip), m_gpu = gpu_at(m, skip);
      const Tensor v_gpu = gpu_at(v, skip);
      const Tensor copy = with_copy ? Tensor::empty({n}, DType::bf16) : Tensor();
      const Tensor copy_gpu = with_copy ? gpu_at(Tensor::zeros({n}, DType::bf16), skip) : Tensor();
      const ops::AdamWHyper hyper{
          .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .step = 3, .grad_scale = 0.7};
      ops::adamw_update(p_cpu, grad, m_cpu, v_cpu, hyper, copy);
      ops::adamw_update(p_gpu, g_gpu, m_gpu, v_gpu, hyper, copy_gpu);
      expect_match(p_gpu, p_cpu, 1e-6, what + " param");
      expect_match(m_gpu, m_cpu, 1e-6, what + " m");
      expect_match(v_gpu, v_cpu, 1e-6, what + " v");
      if (with_copy) expect_match(copy_gpu, copy, 1e-2, what + " compute copy");
    }
  }
}

TEST_F(Cuda, AllocatorCountsAndCaches) {
  Allocator& memory = allocator_for(kGpu);
  kernels::cuda::empty_cache();  // no cached block of an earlier test's may serve the tensor below
  const MemoryStats before = memory.stats();
  {
    const Tensor t = Tensor::zeros({1000, 1000}, DType::f32, kGpu);
    const MemoryStats during = memory.stats();
    EXPECT_EQ(during.allocated, before.allocated + 4000000);
    EXPECT_GE(during.peak_allocated, during.allocated);
    EXPECT_GE(during.reserved, during.allocated);
    EXPECT_EQ(t.to_vector<float>()[123456], 0.0f);
  }
  const MemoryStats after = memory.stats();
  EXPECT_EQ(after.allocated, before.allocated);
  EXPECT_GE(after.reserved, before.reserved + 4000000);  // cached for the next tensor of that size
  const Tensor again = Tensor::empty({1000, 1000}, DType::f32, kGpu);
  EXPECT_EQ(memory.stats().reserved, after.reserved);
  kernels::cuda::empty_cache();
  EXPECT_LE(memory.stats().reserved, after.reserved);
}

// Out to the host and back through page-locked memory on the copy stream, with
// kernels on the compute stream between them: each copy waits for the compute
// queued before it, and compute after wait(slot) sees the slot's copy done.
TEST_F(Cuda, OverlappedCopiesOrderWithTheComputeStream) {
  const int64_t rows = 4, width = 1 << 20;  // 4 MiB a row: long enough for a copy to still run
  const Tensor host = Tensor::zeros({rows, width}, DType::f32);
  {
    ops::OverlappedCopies copies(kGpu, host, 2);
    const Tensor buffers[2] = {Tensor::empty({width}, DType::f32, kGpu), Tensor::empty({width}, DType::f32, kGpu)};
    const Tensor ones = Tensor::from(std::vector<float>(size_t(width), 1.0f), {width}).to(kGpu);
    for (int64_t r = 0; r < rows; ++r) {
      const Tensor& buffer = buffers[r % 2];
      copies.wait(int(r % 2));  // the copy out of this buffer two rows ago is done
      buffer.copy_from(ones);
      ops::scale_(buffer, double(r + 1));
      ops::scale_(buffer, 2.0);
      copies.start(host[r], buffer, int(r % 2));
    }
    for (int64_t r = rows - 1; r >= 0; --r) {  // back in, then doubled again on the device
      const Tensor& buffer = buffers[r % 2];
      copies.start(buffer, host[r], int(r % 2));
      copies.wait(int(r % 2));
      ops::scale_(buffer, 2.0);
      const std::vector<float> back = buffer.to_vector<float>();
      EXPECT_EQ(back.front(), 4.0f * float(r + 1)) << "row " << r;
      EXPECT_EQ(back.back(), 4.0f * float(r + 1)) << "row " << r;
    }
    const Tensor pageable = Tensor::zeros({width}, DType::f32);
    EXPECT_NE(error_of([&] { copies.start(pageable, buffers[0], 0); }).find("not a part of the pinned host tensor"),
              std::string::npos);
  }
  const std::vector<float> out = host.to_vector<float>();  // the destructor waited for the copies
  for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(out[size_t(r * width + width / 2)], 2.0f * float(r + 1));
}

TEST_F(Cuda, ErrorsNameTheCallAndTheProblem) {
  const Tensor x = Tensor::zeros({4}, DType::f32, kGpu);
  // Another device than the process's.
  EXPECT_NE(error_of([&] { kernels::cuda::check_device(Device::cuda(7)); }).find("cuda:7"), std::string::npos);
  // fp64 exists on the CPU only.
  const Tensor d = Tensor::zeros({4}, DType::f64, kGpu);
  const std::string f64 = error_of([&] { ops::scale_(d, 2.0); });
  EXPECT_NE(f64.find("no CUDA kernel for fp64"), std::string::npos) << f64;
  // Out of memory: a request far beyond the device names the sizes.
  const std::string oom = error_of([&] { Tensor::empty({int64_t(1) << 50}, DType::f32, kGpu); });
  EXPECT_NE(oom.find("out of memory on cuda:0"), std::string::npos) << oom;
  ops::synchronize(kGpu);
}

}  // namespace
}  // namespace hone::test
