// The measurement behind hone's GEMM backend (docs/benchmarks.md): GFLOP/s of
// OpenBLAS sgemm and oneDNN's matmul primitive (f32, and bf16 with f32
// accumulation: Debian's OpenBLAS has no bf16 GEMM; both ways hone runs bf16
// products, on the CPU's bf16 instructions and widened to f32) on the shapes of
// a training step of llama_125M at batch 4 x seq 256 (1024 rows), run through
// hone's own kernels::cpu::gemm for oneDNN.
//
//   build/bin/bench_gemm_backends [--threads N]
#include <cblas.h>
#include <fmt/core.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "hone/core/dtype.hpp"
#include "hone/kernels/cpu/gemm.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Shape {
  const char* what;
  int64_t m, n, k;
  bool trans_a, trans_b;
};

// Best of a few runs of f(), in seconds.
template <typename F>
double best_seconds(F&& f) {
  f();
  double best = 1e30;
  for (int run = 0; run < 5; ++run) {
    const auto start = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--threads") {
    omp_set_num_threads(std::stoi(argv[2]));
    openblas_set_num_threads(std::stoi(argv[2]));
  }
  // Forward (x·Wᵀ), input gradient (dy·W) and weight gradient (dyᵀ·x) of the
  // qkv, output, MLP and LM-head projections; the head's input gradient is the
  // one long reduction (K = vocabulary).
  const Shape shapes[] = {
      {"qkv fwd", 1024, 1280, 768, false, true},   {"out fwd", 1024, 768, 768, false, true},
      {"up fwd", 1024, 4096, 768, false, true},    {"down fwd", 1024, 768, 2048, false, true},
      {"head fwd", 1024, 32000, 768, false, true}, {"up dx", 1024, 768, 4096, false, false},
      {"head dx", 1024, 768, 32000, false, false}, {"up dW", 4096, 768, 1024, true, false},
      {"head dW", 32000, 768, 1024, true, false},
  };
  using hone::kernels::cpu::Bf16Products;
  fmt::print("threads {}; hone's choice of bf16 products on this CPU: {}\n", omp_get_max_threads(),
             hone::kernels::cpu::bf16_products_name(hone::kernels::cpu::bf16_products()));
  fmt::print("{:<9} {:>6} {:>6} {:>6}  {:>14} {:>14} {:>14} {:>14}\n", "shape", "M", "N", "K", "openblas f32",
             "onednn f32", "bf16 native", "bf16 widened");
  for (const Shape& s : shapes) {
    const size_t a_size = size_t(s.m * s.k), b_size = size_t(s.k * s.n), c_size = size_t(s.m * s.n);
    std::vector<float> a(a_size, 0.01f), b(b_size, 0.02f), c(c_size);
    std::vector<hone::bf16> a16(a_size, hone::float_to_bf16(0.01f)), b16(b_size, hone::float_to_bf16(0.02f));
    const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
    const int lda = int(s.trans_a ? s.m : s.k), ldb = int(s.trans_b ? s.k : s.n);
    const double openblas = best_seconds([&] {
      cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans, s.trans_b ? CblasTrans : CblasNoTrans, int(s.m),
                  int(s.n), int(s.k), 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), int(s.n));
    });
    auto onednn = [&](const void* pa, const void* pb, hone::DType type) {
      return best_seconds([&] {
        hone::kernels::cpu::gemm({.m = s.m, .n = s.n, .k = s.k, .trans_a = s.trans_a, .trans_b = s.trans_b,
                                  .a = pa, .b = pb, .c = c.data(), .ab_type = type, .c_type = hone::DType::f32});
      });
    };
    const auto bf16_gflops = [&](Bf16Products mode) {
      hone::kernels::cpu::set_bf16_products(mode);
      return flops / onednn(a16.data(), b16.data(), hone::DType::bf16) / 1e9;
    };
    fmt::print("{:<9} {:>6} {:>6} {:>6}  {:>14.1f} {:>14.1f} {:>14.1f} {:>14.1f}\n", s.what, s.m, s.n, s.k,
               flops / openblas / 1e9, flops / onednn(a.data(), b.data(), hone::DType::f32) / 1e9,
               bf16_gflops(Bf16Products::native), bf16_gflops(Bf16Products::widened));
  }
  return 0;
}
