// GEMM and linear layers: every transpose combination and dtype against a plain
// triple loop; linear backward (and through GELU) against finite differences in fp64.
#include <cmath>

#include "hone/kernels/cpu/gemm.hpp"
#include "hone/ops/ops.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

using kernels::cpu::Bf16Products;

// The CPU's bf16 products run `mode`'s way (kernels/cpu/gemm.hpp) while this
// lives, whichever this machine would choose; its choice is restored after.
class Bf16ProductsFor {
 public:
  explicit Bf16ProductsFor(Bf16Products mode) { kernels::cpu::set_bf16_products(mode); }
  ~Bf16ProductsFor() { kernels::cpu::set_bf16_products(chosen_); }

 private:
  Bf16Products chosen_ = kernels::cpu::bf16_products();
};

// Runs `check` with bf16 products on the CPU's bf16 instructions, then widened
// to f32. Only products of 64 rows and columns or more are widened.
void with_each_bf16_products(const std::function<void()>& check) {
  for (const Bf16Products mode : {Bf16Products::native, Bf16Products::widened}) {
    SCOPED_TRACE(std::string("bf16 products: ") + kernels::cpu::bf16_products_name(mode));
    const Bf16ProductsFor way(mode);
    check();
  }
}

// C = alpha·op(A)·op(B) + beta·C0, by definition, in double.
Tensor naive_matmul(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c0, double alpha, double beta) {
  const int64_t batch = c0.size(0), m = c0.size(1), n = c0.size(2), k = ta ? a.size(1) : a.size(2);
  auto A = a.to_vector<double>(), B = b.to_vector<double>(), C = c0.to_vector<double>();
  std::vector<double> out(C.size());
  for (int64_t s = 0; s < batch; ++s)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          double av = ta ? A[size_t(s * k * m + p * m + i)] : A[size_t(s * m * k + i * k + p)];
          double bv = tb ? B[size_t(s * n * k + j * k + p)] : B[size_t(s * k * n + p * n + j)];
          sum += av * bv;
        }
        const size_t idx = size_t(s * m * n + i * n + j);
        out[idx] = alpha * sum + beta * C[idx];
      }
  return Tensor::from(out, c0.shape());
}

struct MatmulCase {
  DType ab, c;
  double tolerance;
};

// op(A)·op(B) of batch × [m, k]·[k, n] in mc's dtypes, every transpose of A
// and B, with and without alpha and beta, against naive_matmul (which sees the
// same, already rounded, inputs).
void expect_matmul_matches_definition(const MatmulCase& mc, int64_t batch, int64_t m, int64_t n, int64_t k) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (auto [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{0.5, 1.0}}) {
        Tensor a = random_tensor(ta ? Shape{batch, k, m} : Shape{batch, m, k}, mc.ab, 1);
        Tensor b = random_tensor(tb ? Shape{batch, n, k} : Shape{batch, k, n}, mc.ab, 2);
        Tensor c = random_tensor({batch, m, n}, mc.c, 3);
        Tensor expected = naive_matmul(a, ta, b, tb, c, alpha, beta);
        ops::matmul(a, ta, b, tb, c, float(alpha), float(beta));
        expect_close(c, expected, mc.tolerance,
                     fmt::format("{}x{}x{}x{} {}->{} ta={} tb={} alpha={} beta={}", batch, m, n, k,
                                 dtype_name(mc.ab), dtype_name(mc.c), ta, tb, alpha, beta));
      }
    }
  }
}

TEST(Matmul, AllTransposesAndDtypesMatchDefinition) {
  for (MatmulCase mc : {MatmulCase{DType::f64, DType::f64, 1e-13}, MatmulCase{DType::f32, DType::f32, 1e-6},
                        MatmulCase{DType::bf16, DType::f32, 1e-6}, MatmulCase{DType::bf16, DType::bf16, 1e-2}}) {
    expect_matmul_matches_definition(mc, 2, 33, 17, 45);  // odd sizes: no kernel may assume multiples
  }
  with_each_bf16_products([] {
    for (MatmulCase mc : {MatmulCase{DType::bf16, DType::f32, 1e-6}, MatmulCase{DType::bf16, DType::bf16, 1e-2}}) {
      expect_matmul_matches_definition(mc, 2, 65, 67, 45);  // large enough to be widened
    }
  });
}

// Widened bf16 products run in blocks of 1024 rows, columns and reduction steps
// (kernels/cpu/gemm.cpp): each dimension past a block, alone and in pairs, with
// a batch, every transpose, alpha and beta; the sum of a block of C is kept in
// f32 over the reduction's blocks and a bf16 C rounded once.
TEST(Matmul, WidenedBf16ProductsAcrossBlocksMatchDefinition) {
  const Bf16ProductsFor widened(Bf16Products::widened);
  struct Size {
    int64_t batch, m, n, k;
  };
  for (const Size s : {Size{2, 1030, 64, 7}, Size{2, 64, 1030, 9}, Size{2, 64, 65, 2100}, Size{1, 1030, 1027, 3},
                       Size{1, 1027, 64, 1030}, Size{1, 64, 1027, 1030}}) {
    for (MatmulCase mc : {MatmulCase{DType::bf16, DType::f32, 1e-5}, MatmulCase{DType::bf16, DType::bf16, 1e-2}}) {
      expect_matmul_matches_definition(mc, s.batch, s.m, s.n, s.k);
    }
  }
}

// Where oneDNN has no bf16 products (a CPU without AVX-512: they failed there
// with "could not create a primitive descriptor iterator"), every bf16 product
// is widened, the small ones of decoding and LoRA's adapters included.
TEST(Matmul, WithoutBf16ProductsInOneDnnEveryProductIsWidened) {
  const bool available = kernels::cpu::native_bf16_products_available();
  kernels::cpu::set_native_bf16_products_available(false);
  for (const Bf16Products mode : {Bf16Products::native, Bf16Products::widened}) {
    const Bf16ProductsFor way(mode);
    for (MatmulCase mc : {MatmulCase{DType::bf16, DType::f32, 1e-6}, MatmulCase{DType::bf16, DType::bf16, 1e-2}}) {
      expect_matmul_matches_definition(mc, 1, 1, 8, 16);  // a decoding step's row
      expect_matmul_matches_definition(mc, 2, 33, 4, 45);  // an adapter's rank columns
      expect_matmul_matches_definition(mc, 1, 70, 66, 2100);
    }
  }
  kernels::cpu::set_native_bf16_products_available(available);
}

// f32 products from a plain B wider than 2048 columns run in column blocks
// (kernels/cpu/gemm.cpp): 3000 columns in four blocks (the last narrower),
// 2049 in three; a batch, transposed A, alpha and beta, and a long reduction
// whose chunks each run in blocks; a transposed B stays one product.
TEST(Matmul, WideF32ProductsInColumnBlocksMatchDefinition) {
  struct Size {
    int64_t batch, m, n, k;
  };
  const MatmulCase f32{DType::f32, DType::f32, 1e-5};
  for (const Size s : {Size{2, 5, 3000, 7}, Size{1, 9, 2049, 33}, Size{1, 3, 2100, 4096 + 70}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (auto [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{0.5, 1.0}}) {
          Tensor a = random_tensor(ta ? Shape{s.batch, s.k, s.m} : Shape{s.batch, s.m, s.k}, f32.ab, 1);
          Tensor b = random_tensor(tb ? Shape{s.batch, s.n, s.k} : Shape{s.batch, s.k, s.n}, f32.ab, 2);
          Tensor c = random_tensor({s.batch, s.m, s.n}, f32.c, 3);
          Tensor expected = naive_matmul(a, ta, b, tb, c, alpha, beta);
          ops::matmul(a, ta, b, tb, c, float(alpha), float(beta));
          expect_close(c, expected, f32.tolerance,
                       fmt::format("{}x{}x{}x{} ta={} tb={} alpha={} beta={}", s.batch, s.m, s.n, s.k, ta, tb, alpha,
                                   beta));
        }
      }
    }
  }
}

// Reductions longer than 4096 run in chunks of K (kernels/cpu/gemm.cpp): every
// chunk's slice of A and B must be read at the whole operand's strides, the
// tail chunk included, and a bf16 result must be rounded once, from the f32
// sum of all chunks, not after each chunk.
TEST(Matmul, LongReductionsMatchDefinition) {
  const int64_t batch = 2, m = 5, n = 7, k = 2 * 4096 + 123;
  // An f32 sum of 8315 products drifts by about sqrt(k)·2^-24 relative: 1e-5.
  for (MatmulCase mc : {MatmulCase{DType::f32, DType::f32, 1e-5}, MatmulCase{DType::bf16, DType::f32, 1e-5},
                        MatmulCase{DType::bf16, DType::bf16, 0.0}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (auto [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{0.5, 1.0}}) {
          const std::string what = fmt::format("{}->{} ta={} tb={} alpha={} beta={}", dtype_name(mc.ab),
                                               dtype_name(mc.c), ta, tb, alpha, beta);
          Tensor a = random_tensor(ta ? Shape{batch, k, m} : Shape{batch, m, k}, mc.ab, 1);
          Tensor b = random_tensor(tb ? Shape{batch, n, k} : Shape{batch, k, n}, mc.ab, 2);
          Tensor c = random_tensor({batch, m, n}, mc.c, 3);
          Tensor expected = naive_matmul(a, ta, b, tb, c, alpha, beta);
          ops::matmul(a, ta, b, tb, c, float(alpha), float(beta));
          if (mc.c != DType::bf16) {
            expect_close(c, expected, mc.tolerance, what);
            continue;
          }
          // Rounded once: within half a bf16 unit in the last place of the exact
          // value (2^-8 relative), plus the f32 sum's own error.
          const auto got = c.to_vector<double>(), want = expected.to_vector<double>();
          for (size_t i = 0; i < got.size(); ++i) {
            const double half_ulp = std::ldexp(1.0, std::ilogb(want[i]) - 8);
            ASSERT_LE(std::abs(got[i] - want[i]), half_ulp + 1e-4) << what << " at " << i << ": " << want[i];
          }
        }
      }
    }
  }
}

// bf16 products with a large transposed A (weight gradients) copy A to plain
// rows first, in blocks of at most 2^22 elements (kernels/cpu/gemm.cpp): sizes
// off every tile, two blocks each, one with a long reduction as well.
TEST(Matmul, Bf16TransposedOperandCopiedInBlocksMatchesDefinition) {
  struct Size {
    int64_t m, n, k;
  };
  for (const Size size : {Size{2100, 5, 2050}, Size{1100, 3, 4100}}) {
    for (MatmulCase mc : {MatmulCase{DType::bf16, DType::f32, 1e-5}, MatmulCase{DType::bf16, DType::bf16, 1e-2}}) {
      for (bool tb : {false, true}) {
        for (auto [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{0.5, 1.0}}) {
          Tensor a = random_tensor({1, size.k, size.m}, mc.ab, 1);
          Tensor b = random_tensor(tb ? Shape{1, size.n, size.k} : Shape{1, size.k, size.n}, mc.ab, 2);
          Tensor c = random_tensor({1, size.m, size.n}, mc.c, 3);
          Tensor expected = naive_matmul(a, true, b, tb, c, alpha, beta);
          ops::matmul(a, true, b, tb, c, float(alpha), float(beta));
          expect_close(c, expected, mc.tolerance,
                       fmt::format("{}x{}x{} ->{} tb={} alpha={} beta={}", size.m, size.n, size.k, dtype_name(mc.c),
                                   tb, alpha, beta));
        }
      }
    }
  }
}

// oneDNN 2.6's AMX bf16 products went wrong (errors larger than the results)
// with 49 to 63 columns on more than one thread; hone runs them in two blocks
// of columns (kernels/cpu/gemm.cpp). Column counts around that range, few and
// many rows, a long reduction (blocks of columns inside chunks of K, bf16's f32
// sum), and a batch: every block must read and write at the whole operands'
// strides. Fails without the split on an AMX machine with 2 threads.
TEST(Matmul, Bf16ProductsOf49To63ColumnsMatchDefinition) {
  struct Size {
    int64_t batch, m, k;
  };
  for (const Size size : {Size{1, 1, 64}, Size{1, 16, 128}, Size{2, 100, 64}, Size{1, 3, 4096 + 100}}) {
    for (const int64_t n : {48, 49, 50, 56, 63, 64}) {
      for (MatmulCase mc : {MatmulCase{DType::bf16, DType::f32, 1e-5}, MatmulCase{DType::bf16, DType::bf16, 1e-2}}) {
        expect_matmul_matches_definition(mc, size.batch, size.m, n, size.k);
      }
    }
  }
}

// An empty result (no rows, or no columns) is a valid product with nothing to do;
// an empty reduction gives zeros.
TEST(Matmul, EmptyOperandsAreValidProducts) {
  Tensor b = random_tensor({2, 5, 4}, DType::f32, 3), no_rows = Tensor::empty({2, 0, 5}, DType::f32);
  Tensor c = Tensor::empty({2, 0, 4}, DType::f32);
  EXPECT_NO_THROW(ops::matmul(no_rows, false, b, false, c));
  Tensor a = random_tensor({2, 3, 5}, DType::f32, 4), no_columns = Tensor::empty({2, 5, 0}, DType::f32);
  Tensor d = Tensor::empty({2, 3, 0}, DType::f32);
  EXPECT_NO_THROW(ops::matmul(a, false, no_columns, false, d));
  Tensor e = random_tensor({2, 3, 4}, DType::f32, 5);
  ops::matmul(Tensor::empty({2, 3, 0}, DType::f32), false, Tensor::empty({2, 0, 4}, DType::f32), false, e);
  EXPECT_EQ(e.to_vector<double>(), std::vector<double>(24, 0.0));
  EXPECT_THROW(ops::matmul(no_rows, false, b, false, d), Error);  // empty, but of the wrong shape
}

// A layer of no inputs ([rows, 0]: a LoRA rank of 0, say) gives its bias in every row.
TEST(Linear, OfNoInputsGivesTheBias) {
  const Tensor x = Tensor::empty({3, 0}, DType::f32), w = Tensor::empty({2, 0}, DType::f32);
  const Tensor bias = Tensor::from(std::vector<float>{1.5f, -2.0f}, {2}), y = random_tensor({3, 2}, DType::f32, 6);
  ops::linear_forward(x, w, bias, y);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 1.5f, -2.0f, 1.5f, -2.0f}));
  ops::linear_forward(x, w, Tensor(), y);
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>(6, 0.0f));
}

// Rows stored longer than they are (GemmArgs' row strides; the output head's
// logits on a GPU): the packed product's values exactly, whichever operands are
// padded, every transpose, with and without beta; C's padding is left alone.
TEST(Matmul, PaddedRowsGiveThePackedProduct) {
  const int64_t m = 7, n = 5, k = 6, pad = 3;
  for (const MatmulCase mc : {MatmulCase{DType::f64, DType::f64, 0}, MatmulCase{DType::f32, DType::f32, 0},
                              MatmulCase{DType::bf16, DType::f32, 0}, MatmulCase{DType::bf16, DType::bf16, 0}}) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        for (const float beta : {0.0f, 1.0f}) {
          const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, mc.ab, 1);
          const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, mc.ab, 2);
          const Tensor c = random_tensor({m, n}, mc.c, 3);
          const Tensor padded_a = with_padded_rows(a, a.size(1) + pad), padded_b = with_padded_rows(b, b.size(1) + 1);
          const Tensor padded_c = with_padded_rows(c, n + pad);
          ops::matmul(a, ta, b, tb, c, 0.5f, beta);
          kernels::cpu::gemm({.m = m, .n = n, .k = k, .trans_a = ta, .trans_b = tb, .alpha = 0.5f, .beta = beta,
                              .a = padded_a.raw(), .b = padded_b.raw(), .c = padded_c.raw(), .ab_type = mc.ab,
                              .c_type = mc.c, .lda = a.size(1) + pad, .ldb = b.size(1) + 1, .ldc = n + pad});
          const std::string what = fmt::format("{}->{} ta={} tb={} beta={}", dtype_name(mc.ab), dtype_name(mc.c),
                                               ta, tb, beta);
          EXPECT_EQ(packed_columns(padded_c, n).to_vector<double>(), c.to_vector<double>()) << what;
          for (const double v : padding_of(padded_c, n)) EXPECT_TRUE(std::isnan(v)) << what;
        }
      }
    }
  }
}

// A linear layer without a bias may write, and its backward pass read, rows
// padded to ops::padded_row_length: the packed layer's values exactly, the
// padding neither written nor read (NaN there would show). Other widths, and
// padding with a bias, are errors.
TEST(Linear, PaddedOutputRowsGiveThePackedLayer) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const int64_t rows = 9, in = 16, out = 13, stride = ops::padded_row_length(out, dtype);
    ASSERT_EQ(stride, 16);  // 13 elements: 4 groups of 4 f32, 2 of 8 bf16
    const Tensor x = random_tensor({rows, in}, dtype, 1), w = random_tensor({out, in}, dtype, 2);
    const Tensor y = Tensor::empty({rows, out}, dtype);
    const Tensor padded_y = with_padded_rows(Tensor::zeros({rows, out}, dtype), stride);
    ops::linear_forward(x, w, Tensor(), y);
    ops::linear_forward(x, w, Tensor(), padded_y);
    EXPECT_EQ(packed_columns(padded_y, out).to_vector<double>(), y.to_vector<double>()) << dtype_name(dtype);
    for (const double v : padding_of(padded_y, out)) EXPECT_TRUE(std::isnan(v)) << dtype_name(dtype);

    const Tensor dy = random_tensor({rows, out}, dtype, 3);
    const Tensor dx = Tensor::empty({rows, in}, dtype), dw = Tensor::empty({out, in}, DType::f32);
    const Tensor padded_dx = Tensor::empty({rows, in}, dtype), padded_dw = Tensor::empty({out, in}, DType::f32);
    ops::linear_backward(dy, x, w, dx, dw, Tensor(), false, false);
    ops::linear_backward(with_padded_rows(dy, stride), x, w, padded_dx, padded_dw, Tensor(), false, false);
    EXPECT_EQ(padded_dx.to_vector<double>(), dx.to_vector<double>()) << dtype_name(dtype);
    EXPECT_EQ(padded_dw.to_vector<double>(), dw.to_vector<double>()) << dtype_name(dtype);

    const Tensor bias = Tensor::zeros({out}, dtype), wider = Tensor::empty({rows, stride + 1}, dtype);
    EXPECT_NE(error_of([&] { ops::linear_forward(x, w, bias, padded_y); }).find("padded rows are only for products with no bias"),
              std::string::npos);
    EXPECT_NE(error_of([&] { ops::linear_forward(x, w, Tensor(), wider); }).find("rows of 17 for 13 output"),
              std::string::npos);
    EXPECT_THROW(ops::linear_backward(padded_y, x, w, dx, dw, Tensor::zeros({out}, DType::f32)), Error);
  }
}

TEST(Matmul, RejectsMismatchedShapes) {
  Tensor a = Tensor::zeros({1, 3, 4}, DType::f32), b = Tensor::zeros({1, 5, 2}, DType::f32);
  Tensor c = Tensor::zeros({1, 3, 2}, DType::f32);
  EXPECT_THROW(ops::matmul(a, false, b, false, c), Error);
}

// The weight gradient reads the input as [rows, in]: an input of another width
// is an error, not a read past its end.
TEST(Linear, BackwardRejectsAnInputThatDoesNotFitTheWeight) {
  const Tensor x = Tensor::zeros({3, 6}, DType::f32), w = Tensor::zeros({4, 7}, DType::f32);
  const Tensor dy = Tensor::zeros({3, 4}, DType::f32), dw = Tensor::zeros({4, 7}, DType::f32);
  const std::string error = error_of([&] { ops::linear_backward(dy, x, w, Tensor(), dw, Tensor()); });
  EXPECT_NE(error.find("input [3, 6] do not fit weight [4, 7]"), std::string::npos) << error;
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  const Shape x_shape{3, 5, 7};
  Tensor x = random_tensor(x_shape, DType::f64, 10);
  Tensor w = random_tensor({4, 7}, DType::f64, 11);
  Tensor bias = random_tensor({4}, DType::f64, 12);
  Tensor probe = random_tensor({3, 5, 4}, DType::f64, 13);  // dL/dy
  Tensor y = Tensor::empty({3, 5, 4}, DType::f64);
  auto loss = [&] {
    ops::linear_forward(x, w, bias, y);
    return dot(y, probe);
  };
  Tensor dx = Tensor::zeros(x_shape, DType::f64), dw = Tensor::zeros({4, 7}, DType::f64);
  Tensor db = Tensor::zeros({4}, DType::f64);
  loss();
  ops::linear_backward(probe, x, w, dx, dw, db);
  expect_gradient(x, dx, loss, "linear dx");
  expect_gradient(w, dw, loss, "linear dweight");
  expect_gradient(bias, db, loss, "linear dbias");

  // Parameter gradients and (on request) the input gradient accumulate.
  Tensor dx2 = dx.clone(), dw2 = dw.clone(), db2 = db.clone();
  ops::linear_backward(probe, x, w, dx2, dw2, db2, /*accumulate_dx=*/true);
  Tensor twice = dw.clone();
  ops::scale_(twice, 2.0);
  expect_close(dw2, twice, 1e-14, "dweight accumulates");
  ops::scale_(dx, 2.0);
  expect_close(dx2, dx, 1e-14, "dx accumulates");
}

// A GELU MLP's up projection with its activation (pre-activation kept), and
// the down projection's input gradient through the activation.
TEST(LinearGelu, KeepsThePreActivationAndMatchesFiniteDifferences) {
  for (const auto kind : {ops::GeluApproximation::none, ops::GeluApproximation::tanh}) {
    const std::string what = kind == ops::GeluApproximation::tanh ? "tanh" : "exact";
    const Tensor x = random_tensor({3, 5, 7}, DType::f64, 30), up = random_tensor({6, 7}, DType::f64, 31);
    const Tensor bias = random_tensor({6}, DType::f64, 32);
    const Tensor pre = Tensor::empty({3, 5, 6}, DType::f64), y = Tensor::empty({3, 5, 6}, DType::f64);
    ops::linear_gelu_forward(x, up, bias, pre, y, kind);
    const Tensor expected_pre = Tensor::empty(pre.shape(), DType::f64);
    const Tensor expected_y = Tensor::empty(y.shape(), DType::f64);
    ops::linear_forward(x, up, bias, expected_pre);
    ops::gelu_forward(expected_pre, expected_y, kind);
    expect_close(pre, expected_pre, 0, "pre-activation " + what);
    expect_close(y, expected_y, 0, "activation " + what);

    const Tensor down = random_tensor({4, 6}, DType::f64, 33), probe = random_tensor({3, 5, 4}, DType::f64, 34);
    const Tensor act = Tensor::empty(pre.shape(), DType::f64), out = Tensor::empty({3, 5, 4}, DType::f64);
    auto loss = [&] {  // of pre alone, through gelu and the down projection
      ops::gelu_forward(pre, act, kind);
      ops::linear_forward(act, down, Tensor(), out);
      return dot(out, probe);
    };
    const Tensor d_pre = Tensor::empty(pre.shape(), DType::f64);
    ops::linear_gelu_input_backward(probe, down, pre, d_pre, kind);
    expect_gradient(pre, d_pre, loss, "pre-activation gradient " + what);
  }
}

TEST(LinearGelu, RejectsAGradientThatDoesNotFitTheWeight) {
  const Tensor dy = Tensor::zeros({3, 4}, DType::f32), down = Tensor::zeros({5, 6}, DType::f32);
  const Tensor pre = Tensor::zeros({3, 6}, DType::f32), d_pre = Tensor::zeros({3, 6}, DType::f32);
  const std::string error = error_of([&] {
    ops::linear_gelu_input_backward(dy, down, pre, d_pre, ops::GeluApproximation::tanh);
  });
  EXPECT_NE(error.find("gradient [3, 4] and pre-activation [3, 6] do not fit weight [5, 6]"), std::string::npos)
      << error;
}

TEST(Linear, Fp32AndBf16MatchFp64) {
  Tensor x64 = random_tensor({64, 96}, DType::f64, 20), w64 = random_tensor({80, 96}, DType::f64, 21);
  Tensor b64 = random_tensor({80}, DType::f64, 22);
  Tensor y64 = Tensor::empty({64, 80}, DType::f64);
  ops::linear_forward(x64, w64, b64, y64);
  for (auto [dtype, tolerance] : {std::pair{DType::f32, 1e-6}, std::pair{DType::bf16, 2e-2}}) {
    auto convert = [&](const Tensor& t, DType to) {
      Tensor f32 = Tensor::empty(t.shape(), DType::f32);
      ops::cast(t, f32);
      if (to == DType::f32) return f32;
      Tensor out = Tensor::empty(t.shape(), to);
      ops::cast(f32, out);
      return out;
    };
    Tensor y = Tensor::empty({64, 80}, dtype);
    ops::linear_forward(convert(x64, dtype), convert(w64, dtype), convert(b64, DType::f32), y);
    expect_close(y, y64, tolerance, fmt::format("linear {}", dtype_name(dtype)));
  }
}

}  // namespace
}  // namespace hone::test
