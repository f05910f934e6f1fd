// gemm()'s products through cuBLASLt.
#include "hone/kernels/cuda/gemm.hpp"

#include <cublasLt.h>
#include <dlfcn.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>
#include <tuple>
#include <vector>

#include "hone/core/error.hpp"
#include "hone/kernels/cuda/check.hpp"
#include "hone/kernels/cuda/runtime.hpp"

namespace hone::kernels::cuda {

namespace {

// cuBLASLt is half a gigabyte of machine code: linking it would cost every
// process 60 ms and 200 MB when it starts, GPU or not (the CPU test suite runs
// hundreds of processes). It is opened on the first GEMM instead.
#define HONE_CUBLASLT_FUNCTIONS(X)                                                                   \
  X(cublasLtCreate) X(cublasLtGetStatusName) X(cublasLtGetStatusString) X(cublasLtMatmul)           \
  X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)       \
  X(cublasLtMatmulDescSetAttribute) X(cublasLtMatmulPreferenceCreate)                              \
  X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)                       \
  X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutSetAttribute)

struct CublasLt {
#define HONE_DECLARE(name) decltype(&::name) name = nullptr;
  HONE_CUBLASLT_FUNCTIONS(HONE_DECLARE)
#undef HONE_DECLARE
};

const CublasLt& lt() {
  static const CublasLt api = [] {
    // The library of the toolkit hone was compiled against (its major version).
    const std::string library = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    HONE_CHECK(handle != nullptr, "cannot load {} for GPU matrix products: {}", library, dlerror());
    CublasLt functions;
#define HONE_RESOLVE(name)                                                                     \
  functions.name = reinterpret_cast<decltype(&::name)>(dlsym(handle, #name));                  \
  HONE_CHECK(functions.name != nullptr, "{} has no function {}: {}", library, #name, dlerror());
    HONE_CUBLASLT_FUNCTIONS(HONE_RESOLVE)
#undef HONE_RESOLVE
    return functions;
  }();
  return api;
}

[[noreturn]] void fail_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  const std::string_view path(file);
  fail("{} failed at {}:{}: {}: {}", call, path.substr(path.find_last_of('/') + 1), line,
       lt().cublasLtGetStatusName(status), lt().cublasLtGetStatusString(status));
}

#define HONE_CUBLAS_CHECK(call)                                                      \
  do {                                                                               \
    const cublasStatus_t hone_status_ = (call);                                      \
    if (hone_status_ != CUBLAS_STATUS_SUCCESS) fail_cublas(hone_status_, #call, __FILE__, __LINE__); \
  } while (0)

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    default: fail("no CUDA GEMM for {} operands", dtype_name(dtype));
  }
}

// cuBLASLt's heuristics assume 256-byte aligned buffers unless told otherwise;
// tensors carved from arenas or sliced from flat buffers are often less aligned.
uint32_t alignment_of(const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  return address == 0 ? 256u : uint32_t(std::min<uintptr_t>(256, address & (~address + 1)));
}

// Everything a plan depends on: shapes, transposes, types, the epilogue and the
// buffers' alignment (a plan chosen for aligned buffers may not run on others),
// the plain product's output included (GELU's pre-activation where the
// epilogue is not fused), and the row strides.
using PlanKey = std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool, DType, DType, cublasLtEpilogue_t, uint32_t,
                           uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, int64_t, int64_t, int64_t>;

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A, B, C (see make_plan)
  cublasLtMatmulAlgo_t algo{};
  bool fused = false;  // the epilogue runs in cuBLASLt's kernel
  // The heuristic's other algorithms, best first (algo is the first), until
  // tuned (HONE_CUBLASLT_TUNE); empty after.
  std::vector<cublasLtMatmulAlgo_t> candidates;
};

// HONE_CUBLASLT_EPILOGUES=off runs every bias and GELU as kernels after plain
// products, =bias fuses the biases alone (GELU's kernels follow): benchmark
// runs each way measure what the epilogues save or cost.
enum class Epilogues { all, bias, none };

Epilogues epilogues_fused() {
  static const Epilogues fused = [] {
    const char* value = std::getenv("HONE_CUBLASLT_EPILOGUES");
    const std::string_view mode = value == nullptr || *value == 0 ? "on" : value;
    if (mode == "on") return Epilogues::all;
    if (mode == "bias") return Epilogues::bias;
    HONE_CHECK(mode == "off", "HONE_CUBLASLT_EPILOGUES={}: expected on, bias or off", mode);
    return Epilogues::none;
  }();
  return fused;
}

// HONE_CUBLASLT_TUNE=on times the heuristic's best algorithms for each product
// (up to kTuneCandidates, at its first call that overwrites C, where running
// it again changes nothing) and keeps the fastest: cuBLASLt's first choice is
// a prediction. Off by default: the choice then depends on timings, so two
// processes may sum in different orders and differ in the last bits.
constexpr int kTuneCandidates = 8;

bool tuning_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("HONE_CUBLASLT_TUNE");
    if (value == nullptr || *value == 0 || std::string_view(value) == "off") return false;
    HONE_CHECK(std::string_view(value) == "on", "HONE_CUBLASLT_TUNE={}: expected on or off", value);
    return true;
  }();
  return enabled;
}

// The epilogue asked of cuBLASLt for `e`, or DEFAULT where its rules rule it out
// (then the product is plain and kernels run the epilogue after it). Biases and
// GELU's inputs are read and written in vectors: buffers sliced from flat ones
// may be aligned to an element alone. GELU's input's rows must be a multiple of
// 8 elements long.
cublasLtEpilogue_t epilogue_to_ask(const GemmArgs& g, const Epilogue& e) {
  if ((e.bias == nullptr && e.gelu == Epilogue::Gelu::none) || epilogues_fused() == Epilogues::none) {
    return CUBLASLT_EPILOGUE_DEFAULT;
  }
  if (g.batch != 1 || (e.bias != nullptr && alignment_of(e.bias) < 16)) return CUBLASLT_EPILOGUE_DEFAULT;
  if (e.gelu != Epilogue::Gelu::none && (alignment_of(e.aux) < 16 || g.n % 8 != 0)) return CUBLASLT_EPILOGUE_DEFAULT;
  switch (e.gelu) {
    case Epilogue::Gelu::forward:
      return e.bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case Epilogue::Gelu::backward: return CUBLASLT_EPILOGUE_DGELU;
    case Epilogue::Gelu::none: break;
  }
  return CUBLASLT_EPILOGUE_BIAS;
}

// Column-major rows×cols with leading dimension `ld`: hone's row-major cols×rows
// with row stride ld (rows where packed).
cublasLtMatrixLayout_t layout(DType dtype, int64_t rows, int64_t cols, int64_t batch, int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  HONE_CUBLAS_CHECK(lt().cublasLtMatrixLayoutCreate(&l, cuda_type(dtype), uint64_t(rows), uint64_t(cols), ld));
  if (batch > 1) {
    const auto count = int32_t(batch);
    const int64_t stride = rows * cols;
    HONE_CUBLAS_CHECK(lt().cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
    HONE_CUBLAS_CHECK(
        lt().cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
  return l;
}

class LtGemm {
 public:
  void run(const GemmArgs& g, const Epilogue& e, void* workspace) {
    std::lock_guard lock(mutex_);
    ensure_handle();
    const cublasLtEpilogue_t asked = epilogue_to_ask(g, e);
    const bool with_bias = asked != CUBLASLT_EPILOGUE_DEFAULT && e.bias != nullptr;
    const bool with_aux = asked != CUBLASLT_EPILOGUE_DEFAULT && e.aux != nullptr;
    const PlanKey key{g.batch,           g.m,
                      g.n,               g.k,
                      g.trans_a,         g.trans_b,
                      g.ab_type,         g.c_type,
                      asked,             alignment_of(g.a),
                      alignment_of(g.b), alignment_of(g.c),
                      with_bias ? alignment_of(e.bias) : 0u, with_aux ? alignment_of(e.aux) : 0u,
                      alignment_of(detail::unfused(g, e).c),
                      g.row_stride_a(),  g.row_stride_b(),
                      g.row_stride_c()};
    auto found = plans_.find(key);
    if (found == plans_.end()) found = plans_.emplace(key, make_plan(g, asked, e)).first;
    Plan& plan = found->second;
    if (plan.fused) set_epilogue_pointers(plan.desc, e);
    // Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: cuBLASLt's A is our B.
    void* const c = plan.fused ? g.c : detail::unfused(g, e).c;
    const auto matmul = [&](const cublasLtMatmulAlgo_t& algo) {
      return lt().cublasLtMatmul(handle_, plan.desc, &g.alpha, g.b, plan.a, g.a, plan.b, &g.beta, c, plan.c, c,
                                 plan.c, &algo, workspace, kWorkspaceBytes, stream());
    };
    if (!plan.candidates.empty() && g.beta == 0.0f) tune(plan, matmul);
    HONE_CUBLAS_CHECK(matmul(plan.algo));
    if (!plan.fused) detail::apply_epilogue(g, e);
  }

 private:
  // Keeps the fastest of the plan's candidates: each run once, then timed over
  // three runs (a candidate cuBLASLt refuses at the product is passed over).
  // The product overwrites C (beta 0), and a GELU epilogue its auxiliary
  // output, so each run leaves the same result.
  template <typename Matmul>
  static void tune(Plan& plan, const Matmul& matmul) {
    cudaEvent_t start = nullptr, stop = nullptr;
    HONE_CUDA_CHECK(cudaEventCreate(&start));
    HONE_CUDA_CHECK(cudaEventCreate(&stop));
    float best_ms = 0;
    bool timed = false;
    for (const cublasLtMatmulAlgo_t& algo : plan.candidates) {
      if (matmul(algo) != CUBLAS_STATUS_SUCCESS) continue;
      HONE_CUDA_CHECK(cudaEventRecord(start, stream()));
      bool ran = true;
      for (int run = 0; run < 3 && ran; ++run) ran = matmul(algo) == CUBLAS_STATUS_SUCCESS;
      HONE_CUDA_CHECK(cudaEventRecord(stop, stream()));
      HONE_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      HONE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      if (ran && (!timed || ms < best_ms)) {
        best_ms = ms;
        plan.algo = algo;
        timed = true;
      }
    }
    HONE_CUDA_CHECK(cudaEventDestroy(start));
    HONE_CUDA_CHECK(cudaEventDestroy(stop));
    plan.candidates.clear();
  }

  void ensure_handle() {
    if (handle_ == nullptr) HONE_CUBLAS_CHECK(lt().cublasLtCreate(&handle_));
  }

  // fp32 accumulation and scalars; cuBLASLt's A is our B (see run).
  static cublasLtMatmulDesc_t matmul_desc(const GemmArgs& g) {
    cublasLtMatmulDesc_t desc = nullptr;
    HONE_CUBLAS_CHECK(lt().cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_a = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    HONE_CUBLAS_CHECK(lt().cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
    HONE_CUBLAS_CHECK(lt().cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
    return desc;
  }

  static void set_epilogue_pointers(cublasLtMatmulDesc_t desc, const Epilogue& e) {
    if (e.bias != nullptr) {
      HONE_CUBLAS_CHECK(
          lt().cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &e.bias, sizeof e.bias));
    }
    if (e.aux != nullptr) {
      HONE_CUBLAS_CHECK(
          lt().cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e.aux, sizeof e.aux));
    }
  }

  Plan make_plan(const GemmArgs& g, cublasLtEpilogue_t epilogue, const Epilogue& e) {
    Plan p;
    p.desc = matmul_desc(g);
    // Our B stored [k, n] (or [n, k] transposed) is column-major n×k (k×n); our A
    // stored [m, k] ([k, m]) is column-major k×m (m×k); C is column-major n×m.
    p.a = g.trans_b ? layout(g.ab_type, g.k, g.n, g.batch, g.row_stride_b())
                    : layout(g.ab_type, g.n, g.k, g.batch, g.row_stride_b());
    p.b = g.trans_a ? layout(g.ab_type, g.m, g.k, g.batch, g.row_stride_a())
                    : layout(g.ab_type, g.k, g.m, g.batch, g.row_stride_a());
    p.c = layout(g.c_type, g.n, g.m, g.batch, g.row_stride_c());

    cublasLtMatmulPreference_t preference = nullptr;
    HONE_CUBLAS_CHECK(lt().cublasLtMatmulPreferenceCreate(&preference));
    const uint64_t workspace = kWorkspaceBytes;
    HONE_CUBLAS_CHECK(lt().cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &workspace, sizeof workspace));
    set_alignments(preference, g.b, g.a, g.c);
    // hone's biases are f32. cuBLASLt's bias epilogue reads the output's type
    // unless told otherwise: for bf16 outputs it is told f32. Where no algorithm
    // takes the epilogue, the product is planned plain and kernels follow it.
    bool found = false;
    if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
      HONE_CUBLAS_CHECK(
          lt().cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
      if (e.bias != nullptr) {
        const auto bias_type = int32_t(CUDA_R_32F);
        HONE_CUBLAS_CHECK(lt().cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                              sizeof bias_type));
      }
      if (e.aux != nullptr) {
        const int64_t aux_rows = g.n;  // column-major: our row length
        HONE_CUBLAS_CHECK(lt().cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_rows,
                                                              sizeof aux_rows));
      }
      set_epilogue_pointers(p.desc, e);  // the heuristic reads their alignment
      found = heuristic(p, preference, /*epilogue_optional=*/true);
      p.fused = found;
      if (!found) {  // a plain descriptor: no epilogue attributes left for the heuristic to weigh
        HONE_CUBLAS_CHECK(lt().cublasLtMatmulDescDestroy(p.desc));
        p.desc = matmul_desc(g);
      }
    }
    // Unfused, the product writes where unfused() says, maybe less aligned than C
    // (a pre-activation sliced one element into its buffer): an algorithm
    // chosen for C's alignment is refused there at the product.
    if (!found) set_alignments(preference, g.b, g.a, detail::unfused(g, e).c);
    if (!found) found = heuristic(p, preference);
    HONE_CUBLAS_CHECK(lt().cublasLtMatmulPreferenceDestroy(preference));
    HONE_CHECK(found, "cuBLASLt has no algorithm for a {}x{}x{} GEMM (batch {}) of {} operands into {}", g.m, g.n,
               g.k, g.batch, dtype_name(g.ab_type), dtype_name(g.c_type));
    return p;
  }

  // Tells the heuristic the alignment of cuBLASLt's A, B and C (= D).
  static void set_alignments(cublasLtMatmulPreference_t preference, const void* a, const void* b, const void* c) {
    for (auto [attribute, value] :
         {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_of(a)},
          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_of(b)},
          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_of(c)},
          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_of(c)}}) {
      HONE_CUBLAS_CHECK(lt().cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof value));
    }
  }

  // The best algorithm for the plan's descriptors (and, where tuning, the next
  // best as candidates), or false where cuBLASLt has none; with an optional
  // epilogue, any refusal of it just means "none".
  bool heuristic(Plan& p, cublasLtMatmulPreference_t preference, bool epilogue_optional = false) {
    cublasLtMatmulHeuristicResult_t results[kTuneCandidates] = {};
    const int asked = tuning_enabled() ? kTuneCandidates : 1;
    int count = 0;
    const cublasStatus_t status =
        lt().cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.c, p.c, preference, asked, results, &count);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED || (epilogue_optional && status != CUBLAS_STATUS_SUCCESS)) return false;
    HONE_CUBLAS_CHECK(status);
    if (count == 0) return false;
    p.algo = results[0].algo;
    p.candidates.clear();
    for (int i = 0; count > 1 && i < count; ++i) {
      if (results[i].state == CUBLAS_STATUS_SUCCESS) p.candidates.push_back(results[i].algo);
    }
    return true;
  }

  std::mutex mutex_;
  cublasLtHandle_t handle_ = nullptr;
  std::map<PlanKey, Plan> plans_;
};

LtGemm& lt_gemm() {
  static LtGemm* instance = new LtGemm;  // never destroyed: the driver may be gone at exit
  return *instance;
}

}  // namespace

void detail::product(const GemmArgs& g, const Epilogue& e, void* workspace) {
  if (e.gelu != Epilogue::Gelu::none && epilogues_fused() == Epilogues::bias) {
    // The product (+ bias) where the GELU epilogue would have written, then GELU's kernel.
    lt_gemm().run(unfused(g, e), {.bias = e.bias}, workspace);
    return apply_epilogue(g, {.gelu = e.gelu, .aux = e.aux});
  }
  lt_gemm().run(g, e, workspace);
}

}  // namespace hone::kernels::cuda
