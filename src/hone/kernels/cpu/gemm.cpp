#include "hone/kernels/cpu/gemm.hpp"

#include <cpuid.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string_view>
#include <tuple>
#include <vector>

#include "hone/core/error.hpp"
#include "hone/core/profiler.hpp"
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

#ifdef __SSE2__
// d[c·ld_d + r] = s[r·ld_s + c] for an 8×8 block of 16-bit elements: three
// rounds of interleaving pairs of rows (16-, 32-, then 64-bit units).
void transpose_8x8_16bit(const uint16_t* s, int64_t ld_s, uint16_t* d, int64_t ld_d) {
  __m128i x[8], y[8];
  for (int i = 0; i < 8; ++i) x[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i * ld_s));
  for (int i = 0; i < 4; ++i) {
    y[i] = _mm_unpacklo_epi16(x[2 * i], x[2 * i + 1]);
    y[i + 4] = _mm_unpackhi_epi16(x[2 * i], x[2 * i + 1]);
  }
  // y: rows 0-3 hold columns 0-3 of row pairs (0,1) (2,3) (4,5) (6,7); rows 4-7 columns 4-7.
  for (int h = 0; h < 2; ++h) {
    const __m128i* p = y + 4 * h;
    x[4 * h + 0] = _mm_unpacklo_epi32(p[0], p[1]);
    x[4 * h + 1] = _mm_unpackhi_epi32(p[0], p[1]);
    x[4 * h + 2] = _mm_unpacklo_epi32(p[2], p[3]);
    x[4 * h + 3] = _mm_unpackhi_epi32(p[2], p[3]);
  }
  for (int h = 0; h < 2; ++h) {
    const __m128i* p = x + 4 * h;
    const int64_t c = 4 * h;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + (c + 0) * ld_d), _mm_unpacklo_epi64(p[0], p[2]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + (c + 1) * ld_d), _mm_unpackhi_epi64(p[0], p[2]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + (c + 2) * ld_d), _mm_unpacklo_epi64(p[1], p[3]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + (c + 3) * ld_d), _mm_unpackhi_epi64(p[1], p[3]));
  }
}
#endif

// oneDNN runs long reductions (the output head's input gradient, K = vocabulary;
// weight gradients over many rows) up to 3x slower than the same product cut
// into pieces of K (docs/benchmarks.md), so reductions longer than
// kLongReduction run as chunks of kReductionChunk accumulated in C, or in an
// f32 scratch of M·N when C is bf16 (rounding once, as one product would). The
// rule is fixed, not timed per run, so results stay bit-identical between runs.
constexpr int64_t kLongReduction = 4096;
constexpr int64_t kReductionChunk = 2048;

// bf16 products with a transposed A of at least this many elements copy it to
// plain rows first (attention's small ones do not), in blocks of at most
// kTransposeBlockElements (8 MiB).
constexpr int64_t kTransposeMinElements = int64_t(1) << 18;
constexpr int64_t kTransposeBlockElements = int64_t(1) << 22;

// oneDNN 2.6's AMX bf16 products (brg:avx512_core_amx_bf16) are wrong, by more
// than their own size, when N is 49 to 63 and more than one thread runs them:
// with 2 to 32 threads every such N went wrong for some M and K, every other N
// up to 300 was right, and so was every N on one thread (docs/architecture.md,
// GEMM). Such products run as two: the first kSafeColumns columns, then the
// rest (at most 15).
constexpr int64_t kBrokenColumnsFirst = 49, kBrokenColumnsLast = 63, kSafeColumns = 48;

// oneDNN 2.6's f32 products from a plain (not transposed) B wider than
// kWideColumns ran at about half the speed of the same product in column
// blocks: GPT-2's MLP down projection's input gradient dY·W and weight
// gradient dYᵀ·X (3072 columns) on dev-cpu-xeon5 (docs/benchmarks.md); 2048
// columns (llama_125M's) did not. Such products run in equal blocks of at most
// kColumnBlock columns.
constexpr int64_t kWideColumns = 2048, kColumnBlock = 768;

// Widened bf16 products (Bf16Products::widened) run in blocks of at most
// kWidenBlock rows, columns and reduction steps: each operand's block widened
// to f32 (4 MiB each, per thread), multiplied by oneDNN's f32 kernels, and a
// block of C summed in f32 over the reduction before it is written once.
constexpr int64_t kWidenBlock = 1024;
// Products with fewer rows or columns than this stay native: widening an
// operand costs about as much as 64 of its uses save (6 bytes moved an element
// against 2.6 ps saved a multiply-add on dev-cpu-xeon3, docs/benchmarks.md), and
// the products of decoding (one row a sequence) and of LoRA's adapters (rank
// columns) are bound by memory, where bf16 reads half f32's bytes.
constexpr int64_t kWidenMinRowsAndColumns = 64;
// Conversions smaller than this run on the calling thread.
constexpr int64_t kParallelElements = int64_t(1) << 15;

// A thread's scratch buffer, grown and never zeroed: it is written before it
// is read, and a vector's resize would zero what it grows by while the sizes
// alternate between a layer's products (about 25 ms of a bf16 llama_125M step
// for the transposed copies, docs/benchmarks.md).
template <typename T>
class Scratch {
 public:
  T* get(int64_t n) {
    if (n > capacity_) {
      data_ = std::make_unique_for_overwrite<T[]>(size_t(n));
      capacity_ = n;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<T[]> data_;
  int64_t capacity_ = 0;
};

// dst (rows × cols, plain) = the rows × cols block at src (row stride ld), widened to f32.
void widen(const bf16* src, int64_t ld, int64_t rows, int64_t cols, float* dst) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements && !omp_in_parallel())
  for (int64_t r = 0; r < rows; ++r) {
    const bf16* s = src + r * ld;
    float* d = dst + r * cols;
    for (int64_t c = 0; c < cols; ++c) d[c] = bf16_to_float(s[c]);
  }
}

// The rows × cols block of C at c (row stride ldc) = sum + beta·C.
template <typename T>
void write_sum(const float* sum, int64_t rows, int64_t cols, float beta, T* c, int64_t ldc) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements && !omp_in_parallel())
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = sum + r * cols;
    T* d = c + r * ldc;
    if (beta == 0.0f) {  // C is not read: it may hold anything, NaN included
      for (int64_t j = 0; j < cols; ++j) d[j] = store<T>(s[j]);
    } else {
      for (int64_t j = 0; j < cols; ++j) d[j] = store<T>(s[j] + beta * load(d[j]));
    }
  }
}

// dst[c·rows + r] = src[r·ld + c] for r < rows, c < cols: 16-bit elements, in
// tiles of 256 rows × 32 columns (a cache line of each source row) across the
// threads, 8×8 at a time in SSE2 registers, down the tile's columns: on Zen 5
// 2-3x faster than 64×64 tiles walked along their rows, whose power-of-two
// source strides (a 4096-wide gradient) keep evicting each other's lines
// (docs/benchmarks.md).
void transpose_16bit(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols, uint16_t* dst) {
  constexpr int64_t kTileRows = 256, kTileCols = 32;
  const auto scalar = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) dst[c * rows + r] = src[r * ld + c];
  };
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t c0 = 0; c0 < cols; c0 += kTileCols) {
    for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
      const int64_t r1 = std::min(rows, r0 + kTileRows), c1 = std::min(cols, c0 + kTileCols);
#ifdef __SSE2__
      // The tile's whole 8×8 blocks, then its last rows and columns one by one.
      const int64_t r8 = r0 + (r1 - r0) / 8 * 8, c8 = c0 + (c1 - c0) / 8 * 8;
      for (int64_t c = c0; c < c8; c += 8) {
        for (int64_t r = r0; r < r8; r += 8) transpose_8x8_16bit(src + r * ld + c, ld, dst + c * rows + r, rows);
      }
      scalar(r0, r8, c8, c1);
      scalar(r8, r1, c0, c1);
#else
      scalar(r0, r1, c0, c1);
#endif
    }
  }
}

// The columns of C that one oneDNN product computes (the last block may be
// narrower): all of them but for the two cases above.
int64_t column_block_width(const GemmArgs& g) {
  if (g.ab_type == DType::bf16 && g.n >= kBrokenColumnsFirst && g.n <= kBrokenColumnsLast) return kSafeColumns;
  if (g.ab_type == DType::f32 && !g.trans_b && g.n > kWideColumns) {
    const int64_t blocks = (g.n + kColumnBlock - 1) / kColumnBlock;
    return ((g.n + blocks - 1) / blocks + 15) / 16 * 16;  // whole cache lines of f32
  }
  return g.n;
}

// Creating a oneDNN primitive costs far more than small GEMMs, and a training
// step repeats the same few shapes, so primitives are made once per shape.
// `n` and `k` are the block's columns and reduction length, `full_n` and
// `full_k` the operands' (their strides).
using GemmKey =
    std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, float, float, DType, DType>;

// A block of a product: reduction steps [p0, p0 + k), columns [j0, j0 + n).
struct GemmBlock {
  int64_t p0, k, j0, n;
};

struct Matmul {
  dnnl::memory::desc a, b, c, scratchpad;
  dnnl::matmul primitive;
};

// Callable from several threads at once (attention runs its blocks' products
// in parallel, each on one thread): the shared primitive cache is locked, and
// each thread keeps its own stream, scratchpad, memory objects (Bound) and bf16
// sum. Inside a parallel region oneDNN runs a product on the calling thread
// alone.
struct DnnlGemm {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::map<GemmKey, Matmul> primitives;
  std::mutex mutex;

  const Matmul& matmul_for(const GemmKey& key) {
    std::lock_guard lock(mutex);
    auto found = primitives.find(key);
    if (found != primitives.end()) return found->second;
    const auto [batch, m, n, k, full_n, full_k, trans_a, trans_b, alpha, beta, ab_type, c_type] = key;
    // Strides of the whole operands, so a block reads and writes its slices in place.
    auto ab = to_dnnl(ab_type);
    dnnl::memory::desc a({batch, m, k}, ab, {m * full_k, trans_a ? 1 : full_k, trans_a ? m : 1});
    dnnl::memory::desc b({batch, k, n}, ab, {full_k * full_n, trans_b ? 1 : full_n, trans_b ? full_k : 1});
    dnnl::memory::desc c({batch, m, n}, to_dnnl(c_type), {m * full_n, full_n, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
      dnnl::post_ops post;
      post.append_sum(beta);
      attr.set_post_ops(post);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine);
    return primitives.emplace(key, Matmul{a, b, c, pd.scratchpad_desc(), dnnl::matmul(pd)}).first->second;
  }

  // A primitive as one thread runs it: memory objects made once and pointed at
  // each call's operands. Attention makes thousands of small products a step,
  // on both threads at once; creating the memory objects and taking the lock
  // per call cost as much as a 64×64×64 product.
  struct Bound {
    const Matmul* matmul;
    dnnl::memory a, b, c, scratchpad;
  };

  Bound& bound_for(const GemmKey& key) {
    thread_local std::map<GemmKey, Bound> bound;
    auto found = bound.find(key);
    if (found != bound.end()) return found->second;
    const Matmul& mm = matmul_for(key);
    Bound made{&mm, dnnl::memory(mm.a, engine, nullptr), dnnl::memory(mm.b, engine, nullptr),
               dnnl::memory(mm.c, engine, nullptr), dnnl::memory(mm.scratchpad, engine, nullptr)};
    return bound.emplace(key, std::move(made)).first->second;
  }

  // C[:, j0:j0+n] (+)= alpha·op(A)[:, p0:p0+k]·op(B)[p0:p0+k, j0:j0+n].
  void run_block(const GemmArgs& g, const GemmBlock& block, float beta, void* c_data, DType c_type) {
    thread_local dnnl::stream stream{engine};
    thread_local std::vector<std::byte> scratchpad;
    Bound& bound = bound_for({g.batch, g.m, block.n, block.k, g.n, g.k, g.trans_a, g.trans_b, g.alpha, beta,
                              g.ab_type, c_type});
    const size_t element = dtype_size(g.ab_type);
    const int64_t a_offset = block.p0 * (g.trans_a ? g.m : 1);
    const int64_t b_offset = g.trans_b ? block.j0 * g.k + block.p0 : block.p0 * g.n + block.j0;
    const auto* a_data = static_cast<const char*>(g.a) + size_t(a_offset) * element;
    const auto* b_data = static_cast<const char*>(g.b) + size_t(b_offset) * element;
    scratchpad.resize(std::max(scratchpad.size(), bound.matmul->scratchpad.get_size()));
    bound.a.set_data_handle(const_cast<char*>(a_data));
    bound.b.set_data_handle(const_cast<char*>(b_data));
    bound.c.set_data_handle(static_cast<char*>(c_data) + size_t(block.j0) * dtype_size(c_type));
    bound.scratchpad.set_data_handle(scratchpad.data());
    bound.matmul->primitive.execute(stream, {{DNNL_ARG_SRC, bound.a},
                                             {DNNL_ARG_WEIGHTS, bound.b},
                                             {DNNL_ARG_DST, bound.c},
                                             {DNNL_ARG_SCRATCHPAD, bound.scratchpad}});
    stream.wait();
  }

  void run(const GemmArgs& g) {
    if (g.trans_a && g.ab_type == DType::bf16 && g.batch == 1 && g.m * g.k >= kTransposeMinElements) {
      return run_transposed_a(g);
    }
    const bool long_reduction = g.k > kLongReduction;
    thread_local std::vector<float> scratch;  // the f32 sum of a long reduction when the result is bf16
    void* sum = g.c;
    DType sum_type = g.c_type;
    const int64_t c_numel = g.batch * g.m * g.n;
    if (long_reduction && g.c_type == DType::bf16) {
      scratch.resize(size_t(c_numel));
      if (g.beta != 0.0f) cast(static_cast<const bf16*>(g.c), scratch.data(), c_numel);
      sum = scratch.data();
      sum_type = DType::f32;
    }
    const int64_t width = column_block_width(g);
    const int64_t chunk = long_reduction ? kReductionChunk : g.k;
    for (int64_t p0 = 0; p0 < g.k; p0 += chunk) {
      const int64_t k = std::min(chunk, g.k - p0);
      const float beta = p0 == 0 ? g.beta : 1.0f;
      for (int64_t j0 = 0; j0 < g.n; j0 += width) {
        run_block(g, {.p0 = p0, .k = k, .j0 = j0, .n = std::min(width, g.n - j0)}, beta, sum, sum_type);
      }
    }
    if (sum != g.c) cast(scratch.data(), static_cast<bf16*>(g.c), c_numel);
  }

  // Bf16Products::widened: op(A)'s and op(B)'s blocks are widened as they are
  // stored (a transposed block stays transposed: the f32 product reads it so).
  // With one block of reduction, A's block serves every block of columns.
  void run_widened(const GemmArgs& g) {
    thread_local Scratch<float> a_block, b_block, sum_block;
    const size_t c_element = dtype_size(g.c_type);
    const bool one_reduction_block = g.k <= kWidenBlock;
    for (int64_t batch = 0; batch < g.batch; ++batch) {
      const bf16* a = static_cast<const bf16*>(g.a) + batch * g.m * g.k;
      const bf16* b = static_cast<const bf16*>(g.b) + batch * g.k * g.n;
      char* c = static_cast<char*>(g.c) + size_t(batch * g.m * g.n) * c_element;
      for (int64_t m0 = 0; m0 < g.m; m0 += kWidenBlock) {
        const int64_t m = std::min(kWidenBlock, g.m - m0);
        const auto widen_a = [&](int64_t p0, int64_t k) {
          float* a_wide = a_block.get(m * k);
          if (g.trans_a) widen(a + p0 * g.m + m0, g.m, k, m, a_wide);
          else widen(a + m0 * g.k + p0, g.k, m, k, a_wide);
          return a_wide;
        };
        float* a_wide = one_reduction_block ? widen_a(0, g.k) : nullptr;
        for (int64_t j0 = 0; j0 < g.n; j0 += kWidenBlock) {
          const int64_t n = std::min(kWidenBlock, g.n - j0);
          float* sum = sum_block.get(m * n);
          for (int64_t p0 = 0; p0 < g.k; p0 += kWidenBlock) {
            const int64_t k = std::min(kWidenBlock, g.k - p0);
            if (!one_reduction_block) a_wide = widen_a(p0, k);
            float* b_wide = b_block.get(k * n);
            if (g.trans_b) widen(b + j0 * g.k + p0, g.k, n, k, b_wide);
            else widen(b + p0 * g.n + j0, g.n, k, n, b_wide);
            run({.m = m, .n = n, .k = k, .trans_a = g.trans_a, .trans_b = g.trans_b, .alpha = g.alpha,
                 .beta = p0 == 0 ? 0.0f : 1.0f, .a = a_wide, .b = b_wide, .c = sum});
          }
          char* c_block = c + size_t(m0 * g.n + j0) * c_element;
          if (g.c_type == DType::bf16) write_sum(sum, m, n, g.beta, reinterpret_cast<bf16*>(c_block), g.n);
          else write_sum(sum, m, n, g.beta, reinterpret_cast<float*>(c_block), g.n);
        }
      }
    }
  }

  // A stored K×M (a weight gradient dYᵀ·X: K = rows) copied to M×K first, a
  // block of rows of C at a time: oneDNN's AMX kernels run such products about
  // 1.4x faster from a plain A than from a strided one, and the copy costs far
  // less than that (docs/benchmarks.md).
  void run_transposed_a(const GemmArgs& g) {
    thread_local Scratch<uint16_t> block;
    const int64_t rows = std::max<int64_t>(1, kTransposeBlockElements / g.k);
    const size_t c_row_bytes = size_t(g.n) * dtype_size(g.c_type);
    for (int64_t m0 = 0; m0 < g.m; m0 += rows) {
      const int64_t m = std::min(rows, g.m - m0);
      uint16_t* plain = block.get(m * g.k);
      transpose_16bit(static_cast<const uint16_t*>(g.a) + m0, g.m, g.k, m, plain);
      GemmArgs part = g;
      part.m = m;
      part.trans_a = false;
      part.a = plain;
      part.c = static_cast<char*>(g.c) + size_t(m0) * c_row_bytes;
      run(part);
    }
  }
};

DnnlGemm& dnnl_gemm() {
  static DnnlGemm instance;
  return instance;
}

bool intel_cpu() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return false;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  return std::string_view(vendor) == "GenuineIntel";
}

// A value chosen once per process, at its first use (by a fixed rule, so that a
// machine always computes the same sums); tests may set it.
class ChosenOnce {
 public:
  int get(int (*choose)()) {
    if (const int value = value_.load(); value >= 0) return value;
    std::call_once(chosen_, [&] {
      int unset = -1;
      value_.compare_exchange_strong(unset, choose());
    });
    return value_.load();
  }
  void set(int value) { value_ = value; }

 private:
  std::atomic<int> value_{-1};  // -1 until chosen or set
  std::once_flag chosen_;
};

ChosenOnce g_native_bf16_available;  // whether oneDNN has bf16 products for this CPU
ChosenOnce g_bf16_products;

// Asked by planning one.
bool onednn_plans_bf16_products() {
  try {
    const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    const dnnl::memory::desc a({1, 16, 16}, dnnl::memory::data_type::bf16, dnnl::memory::format_tag::abc);
    const dnnl::memory::desc c({1, 16, 16}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::abc);
    dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, a, c), engine);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

Bf16Products choose_bf16_products() {
  if (const char* forced = std::getenv("HONE_CPU_BF16_PRODUCTS")) {
    const std::string_view name(forced);
    if (name == "native") {
      HONE_CHECK(native_bf16_products_available(),
                 "HONE_CPU_BF16_PRODUCTS=native: oneDNN has no bf16 products for this CPU (they need AVX-512): "
                 "give widened, or leave it unset");
      return Bf16Products::native;
    }
    if (name == "widened") return Bf16Products::widened;
    fail("HONE_CPU_BF16_PRODUCTS={}: expected native or widened", name);
  }
  if (!native_bf16_products_available()) return Bf16Products::widened;
  const auto isa = unsigned(dnnl::get_effective_cpu_isa());
  const auto has = [&](dnnl::cpu_isa feature) { return (isa & unsigned(feature)) == unsigned(feature); };
  if (has(dnnl::cpu_isa::avx512_core_amx)) return Bf16Products::native;
  if (!has(dnnl::cpu_isa::avx512_core_bf16)) return Bf16Products::widened;
  // AVX-512 BF16 alone: Intel's cores run its dot products at f32's rate (with
  // the conversions, slower than f32: docs/benchmarks.md), AMD's Zen 4 and 5
  // at twice it.
  return intel_cpu() ? Bf16Products::widened : Bf16Products::native;
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

// `rows` rows of `row_bytes` each from rows `from_stride` bytes apart to rows
// `to_stride` bytes apart.
void copy_rows(const void* from, size_t from_stride, void* to, size_t to_stride, int64_t rows, size_t row_bytes) {
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(static_cast<char*>(to) + size_t(r) * to_stride,
                static_cast<const char*>(from) + size_t(r) * from_stride, row_bytes);
  }
}

// A product of padded rows as one of packed copies.
void gemm_padded(const GemmArgs& g) {
  HONE_ASSERT(g.batch == 1);
  const size_t ab = dtype_size(g.ab_type), c = dtype_size(g.c_type);
  // A stored [rows, cols] with its row stride, packed into `packed`.
  auto pack = [](const void* from, int64_t stride, int64_t rows, int64_t cols, size_t element,
                 std::vector<char>& packed) {
    packed.resize(size_t(rows * cols) * element);
    copy_rows(from, size_t(stride) * element, packed.data(), size_t(cols) * element, rows, size_t(cols) * element);
    return packed.data();
  };
  std::vector<char> a, b, sum;
  GemmArgs plain = g;
  plain.lda = plain.ldb = plain.ldc = 0;
  plain.a = pack(g.a, g.row_stride_a(), g.trans_a ? g.k : g.m, g.row_length_a(), ab, a);
  plain.b = pack(g.b, g.row_stride_b(), g.trans_b ? g.n : g.k, g.row_length_b(), ab, b);
  sum.resize(size_t(g.m * g.n) * c);
  if (g.beta != 0.0f) pack(g.c, g.row_stride_c(), g.m, g.n, c, sum);
  plain.c = sum.data();
  gemm(plain);
  copy_rows(sum.data(), size_t(g.n) * c, g.c, size_t(g.row_stride_c()) * c, g.m, size_t(g.n) * c);
}

}  // namespace

void gemm(const GemmArgs& g) {
  HONE_ASSERT(g.batch >= 0 && g.m >= 0 && g.n >= 0 && g.k >= 0);
  if (g.batch == 0 || g.m == 0 || g.n == 0) return;
  const ProductTimer timer(g.batch, g.m, g.n, g.k, g.trans_a, g.trans_b, "", /*on_device=*/false);
  if (!g.packed()) return gemm_padded(g);
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
  if (g.ab_type == DType::bf16 &&
      (!native_bf16_products_available() || (g.m >= kWidenMinRowsAndColumns && g.n >= kWidenMinRowsAndColumns &&
                                             bf16_products() == Bf16Products::widened))) {
    return dnnl_gemm().run_widened(g);
  }
  dnnl_gemm().run(g);
}

Bf16Products bf16_products() {
  return Bf16Products(g_bf16_products.get([] { return int(choose_bf16_products()); }));
}

const char* bf16_products_name(Bf16Products mode) { return mode == Bf16Products::native ? "native" : "widened"; }

void set_bf16_products(Bf16Products mode) { g_bf16_products.set(int(mode)); }

bool native_bf16_products_available() {
  return g_native_bf16_available.get([] { return int(onednn_plans_bf16_products()); }) == 1;
}

void set_native_bf16_products_available(bool available) { g_native_bf16_available.set(int(available)); }

}  // namespace hone::kernels::cpu
