#include "hone/kernels/cpu/gemm.hpp"

#include <cstring>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>

#include "hone/core/error.hpp"

namespace hone::kernels::cpu {

namespace {

dnnl::memory::data_type to_dnnl(DType dtype) {
  switch (dtype) {
    case DType::f32: return dnnl::memory::data_type::f32;
    case DType::bf16: return dnnl::memory::data_type::bf16;
    default: fail("oneDNN GEMM does not take {} operands", dtype_name(dtype));
  }
}

// Creating a oneDNN primitive costs far more than small GEMMs, and a training
// step repeats the same few shapes, so primitives are made once per shape.
using GemmKey = std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool, float, float, DType, DType>;

struct Matmul {
  dnnl::memory::desc a, b, c;
  dnnl::matmul primitive;
};

struct DnnlGemm {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<GemmKey, Matmul> primitives;
  std::mutex mutex;

  Matmul& matmul_for(const GemmArgs& g) {
    GemmKey key{g.batch, g.m, g.n, g.k, g.trans_a, g.trans_b, g.alpha, g.beta, g.ab_type, g.c_type};
    auto found = primitives.find(key);
    if (found != primitives.end()) return found->second;
    using tag = dnnl::memory::format_tag;
    auto ab = to_dnnl(g.ab_type);
    dnnl::memory::desc a({g.batch, g.m, g.k}, ab, g.trans_a ? tag::acb : tag::abc);
    dnnl::memory::desc b({g.batch, g.k, g.n}, ab, g.trans_b ? tag::acb : tag::abc);
    dnnl::memory::desc c({g.batch, g.m, g.n}, to_dnnl(g.c_type), tag::abc);
    dnnl::primitive_attr attr;
    if (g.alpha != 1.0f) attr.set_output_scales(0, {g.alpha});
    if (g.beta != 0.0f) {
      dnnl::post_ops post;
      post.append_sum(g.beta);
      attr.set_post_ops(post);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine);
    return primitives.emplace(key, Matmul{a, b, c, dnnl::matmul(pd)}).first->second;
  }

  void run(const GemmArgs& g) {
    std::lock_guard lock(mutex);
    Matmul& mm = matmul_for(g);
    dnnl::memory a(mm.a, engine, const_cast<void*>(g.a));
    dnnl::memory b(mm.b, engine, const_cast<void*>(g.b));
    dnnl::memory c(mm.c, engine, g.c);
    mm.primitive.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    stream.wait();
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
