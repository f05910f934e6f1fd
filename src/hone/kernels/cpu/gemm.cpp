#include "hone/kernels/cpu/gemm.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

#include "hone/core/error.hpp"
#include "hone/kernels/cpu/elementwise.hpp"

namespace hone::kernels::cpu {

namespace {

dnnl::memory::data_type to_dnnl(DType dtype) {
  switch (dtype) {
    case DType::f32: return dnnl::memory::data_type::f32;
    case DType::bf16: return dnnl::memory::data_type::bf16;
    default: fail("oneDNN GEMM does not take {} operands", dtype_name(dtype));
  }
}

// oneDNN runs long reductions (the output head's input gradient, K = vocabulary;
// weight gradients over many rows) up to 3x slower than the same product cut
// into pieces of K (docs/benchmarks.md), so reductions longer than
// kLongReduction run as chunks of kReductionChunk accumulated in C, or in an
// f32 scratch of M·N when C is bf16 (rounding once, as one product would). The
// rule is fixed, not timed per run, so results stay bit-identical between runs.
constexpr int64_t kLongReduction = 4096;
constexpr int64_t kReductionChunk = 2048;

// Creating a oneDNN primitive costs far more than small GEMMs, and a training
// step repeats the same few shapes, so primitives are made once per shape.
// `k` is the chunk's reduction length, `full_k` the operands' (their strides).
using GemmKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, float, float, DType, DType>;

struct Matmul {
  dnnl::memory::desc a, b, c, scratchpad;
  dnnl::matmul primitive;
};

// Callable from several threads at once (attention runs its blocks' products
// in parallel, each on one thread): the primitive cache is locked, and each
// thread brings its own stream, scratchpad and bf16 sum. Inside a parallel
// region oneDNN runs a product on the calling thread alone.
struct DnnlGemm {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::map<GemmKey, Matmul> primitives;
  std::mutex mutex;

  const Matmul& matmul_for(const GemmArgs& g, int64_t k, float beta, DType c_type) {
    GemmKey key{g.batch, g.m, g.n, k, g.k, g.trans_a, g.trans_b, g.alpha, beta, g.ab_type, c_type};
    std::lock_guard lock(mutex);
    auto found = primitives.find(key);
    if (found != primitives.end()) return found->second;
    // Strides of the whole operands, so a chunk reads its slice in place.
    const int64_t m = g.m, n = g.n, full_k = g.k;
    auto ab = to_dnnl(g.ab_type);
    dnnl::memory::desc a({g.batch, m, k}, ab, {m * full_k, g.trans_a ? 1 : full_k, g.trans_a ? m : 1});
    dnnl::memory::desc b({g.batch, k, n}, ab, {full_k * n, g.trans_b ? 1 : n, g.trans_b ? full_k : 1});
    dnnl::memory::desc c({g.batch, m, n}, to_dnnl(c_type), dnnl::memory::format_tag::abc);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (g.alpha != 1.0f) attr.set_output_scales(0, {g.alpha});
    if (beta != 0.0f) {
      dnnl::post_ops post;
      post.append_sum(beta);
      attr.set_post_ops(post);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine);
    return primitives.emplace(key, Matmul{a, b, c, pd.scratchpad_desc(), dnnl::matmul(pd)}).first->second;
  }

  // C (+)= alpha·op(A)[:, p0:p0+k]·op(B)[p0:p0+k, :].
  void run_chunk(const GemmArgs& g, int64_t p0, int64_t k, float beta, void* c_data, DType c_type) {
    thread_local dnnl::stream stream{engine};
    thread_local std::vector<std::byte> scratchpad;
    const Matmul& mm = matmul_for(g, k, beta, c_type);
    const size_t element = dtype_size(g.ab_type);
    const auto* a_data = static_cast<const char*>(g.a) + size_t(p0 * (g.trans_a ? g.m : 1)) * element;
    const auto* b_data = static_cast<const char*>(g.b) + size_t(p0 * (g.trans_b ? 1 : g.n)) * element;
    scratchpad.resize(std::max(scratchpad.size(), mm.scratchpad.get_size()));
    dnnl::memory a(mm.a, engine, const_cast<char*>(a_data));
    dnnl::memory b(mm.b, engine, const_cast<char*>(b_data));
    dnnl::memory c(mm.c, engine, c_data);
    dnnl::memory pad(mm.scratchpad, engine, scratchpad.data());
    mm.primitive.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}, {DNNL_ARG_SCRATCHPAD, pad}});
    stream.wait();
  }

  void run(const GemmArgs& g) {
    if (g.k <= kLongReduction) return run_chunk(g, 0, g.k, g.beta, g.c, g.c_type);
    thread_local std::vector<float> scratch;  // the f32 sum when the result is bf16
    void* sum = g.c;
    const int64_t c_numel = g.batch * g.m * g.n;
    if (g.c_type == DType::bf16) {
      scratch.resize(size_t(c_numel));
      if (g.beta != 0.0f) cast(static_cast<const bf16*>(g.c), scratch.data(), c_numel);
      sum = scratch.data();
    }
    for (int64_t p0 = 0; p0 < g.k; p0 += kReductionChunk) {
      const float beta = p0 == 0 ? g.beta : 1.0f;
      run_chunk(g, p0, std::min(kReductionChunk, g.k - p0), beta, sum, DType::f32);
    }
    if (sum != g.c) cast(scratch.data(), static_cast<bf16*>(g.c), c_numel);
  }
};

DnnlGemm& dnnl_gemm() {
  static DnnlGemm instance;
  return instance;
}

// f64 exists only to check gradients by finite differences on small shapes.
void gemm_f64(const GemmArgs& g) {
  const auto* A = static_cast<const double*>(g.a);
  const auto* B = static_cast<const double*>(g.b);
  auto* C = static_cast<double*>(g.c);
  const int64_t m = g.m, n = g.n, k = g.k;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t batch = 0; batch < g.batch; ++batch) {
    for (int64_t i = 0; i < m; ++i) {
      const double* a = A + batch * m * k;
      const double* b = B + batch * k * n;
      double* c = C + batch * m * n + i * n;
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          double av = g.trans_a ? a[p * m + i] : a[i * k + p];
          double bv = g.trans_b ? b[j * k + p] : b[p * n + j];
          sum += av * bv;
        }
        c[j] = g.alpha * sum + (g.beta == 0.0f ? 0.0 : g.beta * c[j]);
      }
    }
  }
}

}  // namespace

void gemm(const GemmArgs& g) {
  HONE_ASSERT(g.batch >= 0 && g.m >= 0 && g.n >= 0 && g.k >= 0);
  if (g.batch == 0 || g.m == 0 || g.n == 0) return;
  if (g.ab_type == DType::f64) {
    HONE_ASSERT(g.c_type == DType::f64);
    gemm_f64(g);
    return;
  }
  HONE_CHECK((g.ab_type == DType::f32 && g.c_type == DType::f32) ||
                 (g.ab_type == DType::bf16 && (g.c_type == DType::f32 || g.c_type == DType::bf16)),
             "no CPU GEMM for {} operands with a {} result", dtype_name(g.ab_type), dtype_name(g.c_type));
  if (g.k == 0) {
    // oneDNN rejects an empty reduction; the product is zero.
    HONE_ASSERT(g.beta == 0.0f || g.beta == 1.0f);
    if (g.beta == 0.0f) std::memset(g.c, 0, size_t(g.batch * g.m * g.n) * dtype_size(g.c_type));
    return;
  }
  dnnl_gemm().run(g);
}

}  // namespace hone::kernels::cpu
