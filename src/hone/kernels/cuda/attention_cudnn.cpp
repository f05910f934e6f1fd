#include "hone/kernels/cuda/attention_cudnn.hpp"

#include <fmt/core.h>

#include <atomic>
#include <cstdlib>
#include <string_view>

#include "hone/core/error.hpp"

namespace hone::kernels::cuda {

namespace {

AttentionKernels initial_kernels() {
  const char* name = std::getenv("HONE_CUDA_ATTENTION");
  if (name == nullptr || *name == 0 || std::string_view(name) == "cudnn") return AttentionKernels::cudnn;
  HONE_CHECK(std::string_view(name) == "hone", "HONE_CUDA_ATTENTION={}: expected cudnn or hone", name);
  return AttentionKernels::hone;
}

std::atomic<AttentionKernels>& kernel_choice() {
  static std::atomic<AttentionKernels> choice{initial_kernels()};
  return choice;
}

}  // namespace

AttentionKernels attention_kernels() { return kernel_choice().load(); }

void set_attention_kernels(AttentionKernels kernels) { kernel_choice().store(kernels); }

}  // namespace hone::kernels::cuda

// cuDNN's headers come with its library, which a CUDA toolkit may lack: hone
// then builds without it, and its own kernels take every call.
#if !__has_include(<cudnn_graph.h>)

namespace hone::kernels::cuda {

std::string plan_cudnn_attention(const std::string&, const AttentionDims&, bool) {
  return "hone was built without cuDNN's headers";
}

bool cudnn_attention_built() { return false; }

size_t cudnn_attention_scratch_bytes(const AttentionDims&) { return 0; }

bool cudnn_attention_forward(const bf16*, bf16*, float*, const float*, const AttentionDims&) { return false; }
bool cudnn_attention_backward(const bf16*, const bf16*, const bf16*, const float*, const float*, bf16*,
                              const AttentionDims&) {
  return false;
}

}  // namespace hone::kernels::cuda

#else

#include <cudnn_graph.h>
#include <dlfcn.h>

#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "hone/kernels/cuda/check.hpp"

namespace hone::kernels::cuda {

namespace {

// ---- the library, opened on first use ----

// cuDNN is several hundred megabytes of engines: opened when attention first
// needs it, and optional (hone's kernels run where it is missing).
#define HONE_CUDNN_FUNCTIONS(X)                                                                        \
  X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnGetLastErrorString) X(cudnnCreate) X(cudnnSetStream) \
  X(cudnnBackendCreateDescriptor) X(cudnnBackendDestroyDescriptor) X(cudnnBackendSetAttribute)         \
  X(cudnnBackendGetAttribute) X(cudnnBackendFinalize) X(cudnnBackendExecute)

struct Cudnn {
#define HONE_DECLARE(name) decltype(&::name) name = nullptr;
  HONE_CUDNN_FUNCTIONS(HONE_DECLARE)
#undef HONE_DECLARE
  size_t version = 0;    // e.g. 91900 for 9.19.0
  std::string missing;  // why it cannot be used, or empty
};

const Cudnn& api() {
  static const Cudnn library = [] {
    Cudnn c;
    const std::string name = "libcudnn.so." + std::to_string(CUDNN_MAJOR);
    void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      c.missing = fmt::format("cannot load {}: {}", name, dlerror());
      return c;
    }
#define HONE_RESOLVE(function)                                                              \
  c.function = reinterpret_cast<decltype(&::function)>(dlsym(handle, #function));           \
  if (c.function == nullptr) {                                                              \
    c.missing = fmt::format("{} has no function {}", name, #function);                      \
    return c;                                                                               \
  }
    HONE_CUDNN_FUNCTIONS(HONE_RESOLVE)
#undef HONE_RESOLVE
    // The backend API's enums are stable within a major version only.
    c.version = c.cudnnGetVersion();
    if (c.version / 10000 != CUDNN_MAJOR) {
      c.missing = fmt::format("{} is cuDNN {}, hone was built for cuDNN {}", name, c.version, CUDNN_MAJOR);
      return c;
    }
    if (c.version == 91000 || c.version == 91001) {
      c.missing = fmt::format("cuDNN {} has known bugs in its bf16 fused attention", c.version);
    }
    return c;
  }();
  return library;
}

// cuDNN on this process's device and compute stream: the handle, or why there is none.
struct Session {
  cudnnHandle_t handle = nullptr;
  std::string missing;
};

const Session& session() {
  static const Session current = [] {
    Session s;
    s.missing = api().missing;
    if (!s.missing.empty()) return s;
    const cudaStream_t compute = stream();  // sets this process's device first: the handle is made on it
    cudnnStatus_t status = api().cudnnCreate(&s.handle);
    if (status == CUDNN_STATUS_SUCCESS) status = api().cudnnSetStream(s.handle, compute);
    if (status != CUDNN_STATUS_SUCCESS) s.missing = fmt::format("cuDNN's handle: {}", api().cudnnGetErrorString(status));
    return s;
  }();
  return current;
}

// "cuDNN <what>: <status>: <cuDNN's own explanation>".
std::string describe(cudnnStatus_t status, const char* what) {
  char detail[512] = "";
  api().cudnnGetLastErrorString(detail, sizeof detail);
  return fmt::format("cuDNN {}: {}{}{}", what, api().cudnnGetErrorString(status), detail[0] ? ": " : "", detail);
}

// Throws hone::Error with describe()'s text unless the call succeeded.
void check(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS) fail("{}", describe(status, what));
}

// ---- descriptors ----

// One backend descriptor, destroyed with its owner. Plans keep every
// descriptor they were built from alive (cuDNN's objects refer to each other).
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type) {
    check(api().cudnnBackendCreateDescriptor(type, &handle_), "create descriptor");
  }
  ~Descriptor() {
    if (handle_ != nullptr) api().cudnnBackendDestroyDescriptor(handle_);
  }
  Descriptor(Descriptor&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return handle_; }

  Descriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                  const void* values) {
    check(api().cudnnBackendSetAttribute(handle_, name, type, count, values), "set attribute");
    return *this;
  }
  Descriptor& set(cudnnBackendAttributeName_t name, int64_t value) { return set(name, CUDNN_TYPE_INT64, 1, &value); }
  Descriptor& set(cudnnBackendAttributeName_t name, const std::vector<int64_t>& values) {
    return set(name, CUDNN_TYPE_INT64, int64_t(values.size()), values.data());
  }
  Descriptor& set(cudnnBackendAttributeName_t name, const Descriptor& d) {
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d.handle_);
  }
  Descriptor& set_flag(cudnnBackendAttributeName_t name) {
    const bool yes = true;
    return set(name, CUDNN_TYPE_BOOLEAN, 1, &yes);
  }
  Descriptor& finalize(const char* what) {
    check(api().cudnnBackendFinalize(handle_), what);
    return *this;
  }

 private:
  cudnnBackendDescriptor_t handle_ = nullptr;
};

// ---- plans ----

// What a graph adds to causal attention: ALiBi's bias, packed samples' masks.
struct Variant {
  bool alibi = false, packed = false;
};

Variant variant_of(bool alibi, const AttentionDims& dims) {
  return {.alibi = alibi, .packed = dims.positions != nullptr};
}

// Everything a plan depends on: the direction, the variant and the shape.
// Buffers are checked to be 16-byte aligned before a plan is used, as its
// tensors declare.
using PlanKey = std::tuple<bool, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t>;  // backward, alibi,
                                                                                           // packed, b, s, h, kv, d

struct Plan {
  std::deque<Descriptor> descriptors;  // the graph's, kept alive for the plan
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace_bytes = 0;  // the engine's
  // Tensors of the graph that live at the start of the workspace, before the
  // engine's part (backward: dQ's f32 sums, zeroed before each run, and the
  // dO·O row sums): id, offset, bytes, zeroed.
  struct Scratch {
    int64_t id, offset, bytes;
    bool zeroed;
  };
  std::vector<Scratch> scratch;
  int64_t scratch_bytes = 0;

  Descriptor& make(cudnnBackendDescriptorType_t type) { return descriptors.emplace_back(type); }
  void add_scratch(int64_t id, int64_t bytes, bool zeroed) {
    scratch.push_back({id, scratch_bytes, bytes, zeroed});
    scratch_bytes += scratch_part(bytes);
  }
  static int64_t scratch_part(int64_t bytes) { return (bytes + 255) / 256 * 256; }  // every part 256-byte aligned
};

// The GPU a plan is built for: this process's (its cuDNN handle), or one
// described by a device-properties descriptor (planning without the GPU).
struct Target {
  cudnnHandle_t handle = nullptr;
  cudnnBackendDescriptor_t device = nullptr;
};

// The engine configurations cuDNN's heuristics (in `mode`) propose for a
// graph, best first.
std::deque<Descriptor> engine_configs(const Descriptor& graph, cudnnBackendHeurMode_t mode, const Target& target) {
  Descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (target.device != nullptr) {
    heuristics.set(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &target.device);
  }
  heuristics.finalize("engine heuristics");
  int64_t count = 0;
  check(api().cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
        "engine count");
  std::deque<Descriptor> configs;
  std::vector<cudnnBackendDescriptor_t> handles;
  for (int64_t i = 0; i < count; ++i) handles.push_back(configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR).get());
  check(api().cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count, handles.data()),
        "engine configurations");
  while (int64_t(configs.size()) > count) configs.pop_back();  // fewer may come back
  return configs;
}

// Builds the execution plan for the operations of a graph: the first engine
// configuration, in the order cuDNN's heuristics rank them (then its fallback
// list), whose plan finalizes. Throws hone::Error when none does.
void plan_graph(Plan& plan, const std::vector<const Descriptor*>& operations, const Target& target) {
  std::vector<cudnnBackendDescriptor_t> handles;
  for (const Descriptor* op : operations) handles.push_back(op->get());
  Descriptor& graph = plan.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  if (target.handle != nullptr) graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &target.handle);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(handles.size()), handles.data())
      .finalize("operation graph");
  std::string reason;  // why no plan was made
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    for (Descriptor& config : engine_configs(graph, mode, target)) {
      Descriptor candidate(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      if (target.handle != nullptr) {
        candidate.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &target.handle);
      } else {
        candidate.set(CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &target.device);
      }
      candidate.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config);
      const cudnnStatus_t status = api().cudnnBackendFinalize(candidate.get());
      if (status != CUDNN_STATUS_SUCCESS) {
        // An engine that took the graph and compiled its kernels, but had no
        // driver to load them into (planning for a described GPU), is the
        // most telling failure.
        if (reason.empty() || status == CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER) {
          reason = describe(status, "execution plan");
        }
        continue;
      }
      int64_t count = 0;
      check(api().cudnnBackendGetAttribute(candidate.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                           CUDNN_TYPE_INT64, 1, &count, &plan.workspace_bytes),
            "workspace size");
      plan.descriptors.push_back(std::move(config));  // the plan's configuration lives as long as it does
      plan.plan = plan.descriptors.emplace_back(std::move(candidate)).get();
      return;
    }
  }
  fail("{}", reason.empty() ? "cuDNN proposes no engine for the graph" : reason);
}

// Runs a plan on the stream with device (or, for by-value scalars, host)
// pointers per tensor id.
void execute(const Plan& plan, const std::vector<std::pair<int64_t, const void*>>& tensors) {
  std::vector<int64_t> ids;
  std::vector<void*> pointers;
  for (const auto& [id, pointer] : tensors) {
    ids.push_back(id);
    pointers.push_back(const_cast<void*>(pointer));
  }
  const int64_t total = plan.scratch_bytes + plan.workspace_bytes;
  std::optional<DeviceBuffer> workspace;
  char* base = total > 0 ? workspace.emplace(size_t(total)).as<char>() : nullptr;
  for (const Plan::Scratch& part : plan.scratch) {
    ids.push_back(part.id);
    pointers.push_back(base + part.offset);
    if (part.zeroed) HONE_CUDA_CHECK(cudaMemsetAsync(base + part.offset, 0, size_t(part.bytes), stream()));
  }
  void* workspace_pointer = plan.workspace_bytes > 0 ? base + plan.scratch_bytes : nullptr;
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, ids)
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(pointers.size()), pointers.data())
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace_pointer)
      .finalize("variant pack");
  check(api().cudnnBackendExecute(session().handle, plan.plan, pack.get()), "execute");
}

// ---- the graphs ----

// Tensor ids in the graphs and variant packs.
enum : int64_t {
  kQ = 1, kK, kV, kO, kStats, kScale, kFill, kSlopes, kPositions,  // both passes
  kDO, kDQ, kDK, kDV, kOne, kRowSums, kDQSum,                       // backward
  kFirstVirtual = 100
};

// Every buffer is 16-byte aligned (takes() checks), as the tensors declare.
constexpr int64_t kAlignment = 16;

// Where hone's buffers put each tensor, as cuDNN's [batch, heads, seq, head_dim]
// views: q, k and v (and their gradients) are column ranges of the fused qkv
// rows; out and its gradient are [batch, seq, heads·head_dim]; lse [batch, heads, seq].
struct Layout {
  explicit Layout(const AttentionDims& d)
      : b(d.batch), s(d.seq), h(d.n_heads), kv(d.n_kv_heads), hd(d.head_dim), row((h + 2 * kv) * hd) {}
  int64_t b, s, h, kv, hd, row;
  int64_t q_offset = 0, k_offset = h * hd, v_offset = (h + kv) * hd;

  std::vector<int64_t> qkv_dims(int64_t heads) const { return {b, heads, s, hd}; }
  std::vector<int64_t> qkv_strides() const { return {s * row, hd, row, 1}; }
  std::vector<int64_t> out_dims() const { return {b, h, s, hd}; }
  std::vector<int64_t> out_strides() const { return {s * h * hd, hd, h * hd, 1}; }
  std::vector<int64_t> stats_dims() const { return {b, h, s, 1}; }
  std::vector<int64_t> stats_strides() const { return {h * s, s, 1, 1}; }
  // The backward pass's scratch: dQ summed in f32, and rowsum(dO ⊙ O).
  int64_t dq_sums_bytes() const { return b * h * s * hd * int64_t(sizeof(float)); }
  int64_t row_sums_bytes() const { return b * h * s * int64_t(sizeof(float)); }
};

// The masked scores' fill value: cuDNN's engines take -inf from 9.10 on (every
// causal row keeps its diagonal, so no row is all fill either way).
float mask_fill() {
  return api().version >= 91000 ? -std::numeric_limits<float>::infinity()
                                          : std::numeric_limits<float>::lowest();
}

// Builds one pass's operation graph into a Plan: tensors and operations in
// cuDNN's backend terms, each finalized as it is made.
class GraphBuilder {
 public:
  GraphBuilder(Plan& plan, const Layout& l, const Variant& variant) : plan_(plan), l_(l), variant_(variant) {}

  // A tensor hone passes in the variant pack, as a device pointer.
  const Descriptor& tensor(int64_t id, cudnnDataType_t type, const std::vector<int64_t>& dims,
                           const std::vector<int64_t>& strides) {
    return make_tensor(id, type, dims, strides, false, false);
  }
  // A host float passed by value (one descriptor per id, however often used).
  const Descriptor& scalar(int64_t id) {
    auto found = scalars_.find(id);
    if (found == scalars_.end()) {
      const Descriptor& t = make_tensor(id, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
      found = scalars_.emplace(id, &t).first;
    }
    return *found->second;
  }
  // Intermediates cuDNN keeps to itself: [b, h, s, s] scores, packed, and
  // [b, h, s, 1] per-query values.
  const Descriptor& scores(cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    const int64_t s = l_.s;
    return intermediate(type, {l_.b, l_.h, s, s}, {l_.h * s * s, s * s, s, 1});
  }
  const Descriptor& per_query() { return intermediate(CUDNN_DATA_FLOAT, l_.stats_dims(), l_.stats_strides()); }
  // [b, h, s_kv, s_q] in bf16: the scores' transpose as the backward products take it.
  const Descriptor& scores_transposed() {
    const int64_t s = l_.s;
    return intermediate(CUDNN_DATA_BFLOAT16, {l_.b, l_.h, s, s}, {l_.h * s * s, s * s, 1, s});
  }
  const Descriptor& intermediate(cudnnDataType_t type, const std::vector<int64_t>& dims,
                                 const std::vector<int64_t>& strides) {
    return make_tensor(next_virtual_++, type, dims, strides, true, false);
  }

  void matmul(const Descriptor& c, const Descriptor& a, const Descriptor& b) {
    Descriptor& desc = plan_.make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    desc.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32).finalize("matmul");
    add(plan_.make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR)
            .set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a)
            .set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b)
            .set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c)
            .set(CUDNN_ATTR_OPERATION_MATMUL_DESC, desc)
            .finalize("matmul operation"));
  }

  // y = mode(x[, b[, t]]); GEN_INDEX takes an axis, comparisons compute in booleans.
  void pointwise(cudnnPointwiseMode_t mode, const Descriptor& y, const Descriptor& x, const Descriptor* b = nullptr,
                 const Descriptor* t = nullptr, int64_t axis = -1) {
    pointwise_in(mode == CUDNN_POINTWISE_CMP_GE ? CUDNN_DATA_BOOLEAN : CUDNN_DATA_FLOAT, mode, y, x, b, t, axis);
  }
  void pointwise_in(cudnnDataType_t precision, cudnnPointwiseMode_t mode, const Descriptor& y, const Descriptor& x,
                    const Descriptor* b, const Descriptor* t, int64_t axis) {
    Descriptor& desc = plan_.make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    desc.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
        .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision);
    if (axis >= 0) desc.set(CUDNN_ATTR_POINTWISE_AXIS, axis);
    desc.finalize("pointwise");
    const float one = 1.0f;
    Descriptor& op = plan_.make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, desc)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    if (b != nullptr) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
    if (t != nullptr) op.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t);
    add(op.finalize("pointwise operation"));
  }

  // y [b, h, s, 1] = the rows of x reduced by `reduce` (its last dimension).
  void reduction(cudnnReduceTensorOp_t reduce, const Descriptor& y, const Descriptor& x) {
    Descriptor& desc = plan_.make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    desc.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32)
        .set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce)
        .finalize("reduction");
    add(plan_.make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR)
            .set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, desc)
            .set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x)
            .set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y)
            .finalize("reduction operation"));
  }

  // y: x's elements under y's dimensions, strides and type (a transposed
  // view, a cast).
  void reshape(const Descriptor& y, const Descriptor& x) {
    add(plan_.make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR)
            .set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x)
            .set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y)
            .finalize("reshape operation"));
  }

  // Q·Kᵀ·scale, plus ALiBi's bias where the graph has it: the first steps of
  // both passes.
  const Descriptor& scaled_scores(const Descriptor& q, const Descriptor& k_transposed) {
    const Descriptor& raw = scores();
    matmul(raw, q, k_transposed);
    const Descriptor& scaled = scores();
    pointwise(CUDNN_POINTWISE_MUL, scaled, raw, &scalar(kScale));
    return variant_.alibi ? with_alibi(scaled) : scaled;
  }

  // x + slope·(key index - query index), the slopes one f32 per query head
  // (hone's kernels add the same; cuDNN's engines recognize it in this form).
  const Descriptor& with_alibi(const Descriptor& x) {
    const Descriptor& bias = scores();
    const Descriptor& biased = scores();
    const Descriptor& slopes = tensor(kSlopes, CUDNN_DATA_FLOAT, {1, l_.h, 1, 1}, {l_.h, 1, 1, 1});
    pointwise(CUDNN_POINTWISE_MUL, bias, difference(index(x, 3), index(x, 2)), &slopes);
    pointwise(CUDNN_POINTWISE_ADD, biased, x, &bias);
    return biased;
  }

  // x with the fill value for every key its query does not see: the keys after
  // it (top-left causal: key index <= query index is kept) and, with packed
  // samples, the keys before its sample starts (key index >= query index - the
  // query's position in its sample, one int32 per query: [b, 1, s, 1]). cuDNN's
  // engines take the second condition as a second select on the int32 start
  // (not as a LOGICAL_AND of two conditions, nor with the start in f32).
  const Descriptor& mask_hidden_keys(const Descriptor& x) {
    const Descriptor& masked = fill_unless(x, index(x, 2), index(x, 3));
    if (!variant_.packed) return masked;
    const Descriptor& positions = tensor(kPositions, CUDNN_DATA_INT32, {l_.b, 1, l_.s, 1}, {l_.s, l_.s, 1, 1});
    return fill_unless(masked, index(masked, 3), difference(index(masked, 2), positions));
  }

  void plan(const Target& target) { plan_graph(plan_, operations_, target); }

 private:
  // The int32 index of every score along `axis` (2: its query, 3: its key).
  const Descriptor& index(const Descriptor& x, int64_t axis) {
    const Descriptor& y = scores(CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, y, x, nullptr, nullptr, axis);
    return y;
  }
  // a - b in int32.
  const Descriptor& difference(const Descriptor& a, const Descriptor& b) {
    const Descriptor& y = scores(CUDNN_DATA_INT32);
    pointwise_in(CUDNN_DATA_INT32, CUDNN_POINTWISE_SUB, y, a, &b, nullptr, -1);
    return y;
  }
  // x where a >= b, else the fill value.
  const Descriptor& fill_unless(const Descriptor& x, const Descriptor& a, const Descriptor& b) {
    const Descriptor& keep = scores(CUDNN_DATA_BOOLEAN);
    const Descriptor& y = scores();
    pointwise(CUDNN_POINTWISE_CMP_GE, keep, a, &b);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, y, x, &scalar(kFill), &keep);
    return y;
  }

  const Descriptor& make_tensor(int64_t id, cudnnDataType_t type, const std::vector<int64_t>& dims,
                                const std::vector<int64_t>& strides, bool is_virtual, bool by_value) {
    Descriptor& t = plan_.make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type)
        .set(CUDNN_ATTR_TENSOR_DIMENSIONS, dims)
        .set(CUDNN_ATTR_TENSOR_STRIDES, strides)
        .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, id)
        .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, kAlignment);
    if (is_virtual) t.set_flag(CUDNN_ATTR_TENSOR_IS_VIRTUAL);
    if (by_value) t.set_flag(CUDNN_ATTR_TENSOR_IS_BY_VALUE);
    return t.finalize("tensor");
  }
  void add(const Descriptor& op) { operations_.push_back(&op); }

  Plan& plan_;
  const Layout& l_;
  const Variant variant_;
  int64_t next_virtual_ = kFirstVirtual;
  std::map<int64_t, const Descriptor*> scalars_;
  std::vector<const Descriptor*> operations_;
};

// Kᵀ (or Vᵀ) as a view of the rows of K (V): the last two dimensions and
// strides swapped.
const Descriptor& transposed_view(GraphBuilder& g, int64_t id, const Layout& l) {
  return g.tensor(id, CUDNN_DATA_BFLOAT16, {l.b, l.kv, l.hd, l.s}, {l.s * l.row, l.hd, 1, l.row});
}

// out = softmax(mask(Q·Kᵀ·scale [+ ALiBi]))·V and lse = its logsumexp per
// query, softmax written out as cuDNN's fused engines recognize it.
std::unique_ptr<Plan> forward_plan(const AttentionDims& d, const Variant& variant, const Target& target) {
  auto plan = std::make_unique<Plan>();
  const Layout l(d);
  GraphBuilder g(*plan, l, variant);
  const Descriptor& q = g.tensor(kQ, CUDNN_DATA_BFLOAT16, l.qkv_dims(l.h), l.qkv_strides());
  const Descriptor& v = g.tensor(kV, CUDNN_DATA_BFLOAT16, l.qkv_dims(l.kv), l.qkv_strides());
  const Descriptor& out = g.tensor(kO, CUDNN_DATA_BFLOAT16, l.out_dims(), l.out_strides());
  const Descriptor& lse = g.tensor(kStats, CUDNN_DATA_FLOAT, l.stats_dims(), l.stats_strides());
  const Descriptor& masked = g.mask_hidden_keys(g.scaled_scores(q, transposed_view(g, kK, l)));
  const Descriptor& max = g.per_query();
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, max, masked);
  const Descriptor& centered = g.scores();
  g.pointwise(CUDNN_POINTWISE_SUB, centered, masked, &max);
  const Descriptor& exps = g.scores();
  g.pointwise(CUDNN_POINTWISE_EXP, exps, centered);
  const Descriptor& sum = g.per_query();
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, sum, exps);
  const Descriptor& log_sum = g.per_query();
  g.pointwise(CUDNN_POINTWISE_LOG, log_sum, sum);
  g.pointwise(CUDNN_POINTWISE_ADD, lse, max, &log_sum);
  // The second product takes the probabilities in the inputs' type.
  const Descriptor& probabilities = g.scores(CUDNN_DATA_BFLOAT16);
  g.pointwise(CUDNN_POINTWISE_DIV, probabilities, exps, &sum);
  g.matmul(out, probabilities, v);
  g.plan(target);
  return plan;
}

// dQ, dK and dV from dO, the inputs and the forward's out and lse: the
// probabilities recomputed from lse, dV = Pᵀ·dO, dS = P ⊙ (dO·Vᵀ - rowsum(dO ⊙ O))·scale,
// dK = dSᵀ·Q, dQ = dS·K (summed in f32 in the workspace). With grouped heads,
// dK and dV are summed over each group's query heads.
std::unique_ptr<Plan> backward_plan(const AttentionDims& d, const Variant& variant, const Target& target) {
  auto plan = std::make_unique<Plan>();
  const Layout l(d);
  GraphBuilder g(*plan, l, variant);
  const bool grouped = l.kv != l.h;
  const Descriptor& q = g.tensor(kQ, CUDNN_DATA_BFLOAT16, l.qkv_dims(l.h), l.qkv_strides());
  const Descriptor& k_transposed = transposed_view(g, kK, l);
  const Descriptor& v_transposed = transposed_view(g, kV, l);
  const Descriptor& out = g.tensor(kO, CUDNN_DATA_BFLOAT16, l.out_dims(), l.out_strides());
  const Descriptor& d_out = g.tensor(kDO, CUDNN_DATA_BFLOAT16, l.out_dims(), l.out_strides());
  const Descriptor& lse = g.tensor(kStats, CUDNN_DATA_FLOAT, l.stats_dims(), l.stats_strides());
  const Descriptor& d_q = g.tensor(kDQ, CUDNN_DATA_BFLOAT16, l.qkv_dims(l.h), l.qkv_strides());
  const Descriptor& d_k = g.tensor(kDK, CUDNN_DATA_BFLOAT16, l.qkv_dims(l.kv), l.qkv_strides());
  const Descriptor& d_v = g.tensor(kDV, CUDNN_DATA_BFLOAT16, l.qkv_dims(l.kv), l.qkv_strides());
  const std::vector<int64_t> packed{l.h * l.s * l.hd, l.s * l.hd, l.hd, 1};  // [b, h, s, hd] in order

  // rowsum(dO ⊙ O), into the workspace.
  const Descriptor& products = g.intermediate(CUDNN_DATA_FLOAT, l.out_dims(), packed);
  g.pointwise(CUDNN_POINTWISE_MUL, products, d_out, &out);
  const Descriptor& sums = g.per_query();
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, sums, products);
  const Descriptor& row_sums = g.tensor(kRowSums, CUDNN_DATA_FLOAT, l.stats_dims(), l.stats_strides());
  plan->add_scratch(kRowSums, l.row_sums_bytes(), false);
  g.pointwise(CUDNN_POINTWISE_MUL, row_sums, sums, &g.scalar(kOne));

  // P = exp(mask(Q·Kᵀ·scale - lse)).
  const Descriptor& centered = g.scores();
  g.pointwise(CUDNN_POINTWISE_SUB, centered, g.scaled_scores(q, k_transposed), &lse);
  const Descriptor& p = g.scores();
  g.pointwise(CUDNN_POINTWISE_EXP, p, g.mask_hidden_keys(centered));

  // dV = Pᵀ·dO (per query head, then summed over the group).
  const Descriptor& p_transposed = g.scores_transposed();
  g.reshape(p_transposed, p);
  const Descriptor& d_v_heads = grouped ? g.intermediate(CUDNN_DATA_BFLOAT16, l.out_dims(), packed) : d_v;
  g.matmul(d_v_heads, p_transposed, d_out);
  if (grouped) g.reduction(CUDNN_REDUCE_TENSOR_ADD, d_v, d_v_heads);

  // dS = P ⊙ (dO·Vᵀ - rowsum)·scale.
  const Descriptor& d_p = g.scores();
  g.matmul(d_p, d_out, v_transposed);
  const Descriptor& d_p_centered = g.scores();
  g.pointwise(CUDNN_POINTWISE_SUB, d_p_centered, d_p, &row_sums);
  const Descriptor& d_s_unscaled = g.scores();
  g.pointwise(CUDNN_POINTWISE_MUL, d_s_unscaled, d_p_centered, &p);
  const Descriptor& d_s = g.scores();
  g.pointwise(CUDNN_POINTWISE_MUL, d_s, d_s_unscaled, &g.scalar(kScale));

  // dK = dSᵀ·Q (per query head, then summed over the group).
  const Descriptor& d_s_transposed = g.scores_transposed();
  g.reshape(d_s_transposed, d_s);
  const Descriptor& d_k_heads = grouped ? g.intermediate(CUDNN_DATA_BFLOAT16, l.out_dims(), packed) : d_k;
  g.matmul(d_k_heads, d_s_transposed, q);
  if (grouped) g.reduction(CUDNN_REDUCE_TENSOR_ADD, d_k, d_k_heads);

  // dQ = dS·K, summed in f32 in the workspace, then rounded into d_qkv.
  const Descriptor& k = g.intermediate(CUDNN_DATA_FLOAT, l.qkv_dims(l.kv), l.qkv_strides());
  g.reshape(k, k_transposed);
  const Descriptor& d_q_sums = g.tensor(kDQSum, CUDNN_DATA_FLOAT, l.out_dims(), packed);
  plan->add_scratch(kDQSum, l.dq_sums_bytes(), true);
  g.matmul(d_q_sums, d_s, k);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, d_q, d_q_sums);
  g.plan(target);
  return plan;
}

// ---- which calls, and the plans per shape ----

// cuDNN compiles a plan's kernels for each shape at run time: it takes
// lengths that are multiples of 128, the ones training repeats step after step,
// and leaves the one-off lengths of prompts to hone's kernels. (Before 9.15.1
// its backward pass could also read out of bounds at other lengths.)
constexpr int64_t kLengthMultiple = 128;

// Whether cuDNN is to take a call of this shape (the buffers and the GPU aside).
bool shape_taken(const AttentionDims& d) {
  return attention_kernels() == AttentionKernels::cudnn && (d.head_dim == 64 || d.head_dim == 128) &&
         d.seq % kLengthMultiple == 0;
}

// Whether cuDNN is to take a call with these buffers (null for absent ones).
bool takes(const AttentionDims& d, std::initializer_list<const void*> buffers) {
  if (!shape_taken(d) || reinterpret_cast<uintptr_t>(d.positions) % kAlignment != 0) return false;
  for (const void* p : buffers) {
    if (reinterpret_cast<uintptr_t>(p) % kAlignment != 0) return false;
  }
  if (compute_capability() < 80) return false;
  if (!session().missing.empty()) {
    static const bool said = [] {
      fmt::print(stderr, "hone: cuDNN's fused attention is unavailable ({}); hone's attention kernels run instead\n",
                 session().missing);
      return true;
    }();
    (void)said;
    return false;
  }
  return true;
}

// Runs the plan for a shape, built on first use. False where cuDNN has no plan
// for it or fails to run the one it built (said once; from then on hone's
// kernels take the shape, and they overwrite every output).
bool run_plan(bool backward, const Variant& v, const AttentionDims& d,
              const std::vector<std::pair<int64_t, const void*>>& tensors) {
  static std::mutex mutex;
  static auto* plans = new std::map<PlanKey, std::unique_ptr<Plan>>;  // never destroyed: cuDNN may be gone at exit
  std::lock_guard lock(mutex);
  const PlanKey key{backward, v.alibi, v.packed, d.batch, d.seq, d.n_heads, d.n_kv_heads, d.head_dim};
  const auto give_up = [&](const char* what, const Error& e) {
    cudaGetLastError();  // a launch that failed inside cuDNN is not the next kernel's error
    fmt::print(stderr,
               "hone: cuDNN {} fused attention {}{}{} for batch {}, seq {}, {} query and {} key/value heads of size {} "
               "({}); hone's attention kernels run instead\n",
               what, backward ? "backward pass" : "forward pass", v.alibi ? " with ALiBi" : "",
               v.packed ? " over packed samples" : "", d.batch, d.seq, d.n_heads, d.n_kv_heads, d.head_dim, e.what());
  };
  auto found = plans->find(key);
  if (found == plans->end()) {
    std::unique_ptr<Plan> plan;
    try {
      const Target target{.handle = session().handle};
      plan = backward ? backward_plan(d, v, target) : forward_plan(d, v, target);
    } catch (const Error& e) {
      give_up("has no", e);
    }
    found = plans->emplace(key, std::move(plan)).first;
  }
  if (found->second == nullptr) return false;
  try {
    execute(*found->second, tensors);
    return true;
  } catch (const Error& e) {
    give_up("failed to run its", e);
    cudaStreamSynchronize(stream());  // its kernels queued before the failure may still run; error ignored
    cudaGetLastError();
    found->second.reset();
    return false;
  }
}

}  // namespace

bool cudnn_attention_built() { return true; }

size_t cudnn_attention_scratch_bytes(const AttentionDims& dims) {
  if (!shape_taken(dims)) return 0;
  const Layout l(dims);
  return size_t(Plan::scratch_part(l.dq_sums_bytes()) + Plan::scratch_part(l.row_sums_bytes()));
}

std::string plan_cudnn_attention(const std::string& device_properties, const AttentionDims& dims, bool alibi) {
  if (!api().missing.empty()) return api().missing;
  try {
    Descriptor device(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
    device.set(CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, int64_t(device_properties.size()),
               device_properties.data())
        .finalize("device properties");
    const Target target{.device = device.get()};
    std::string errors;
    for (const bool backward : {false, true}) {
      try {
        backward ? backward_plan(dims, variant_of(alibi, dims), target)
                 : forward_plan(dims, variant_of(alibi, dims), target);
      } catch (const Error& e) {
        errors += fmt::format("{}{} pass: {}", errors.empty() ? "" : "; ", backward ? "backward" : "forward", e.what());
      }
    }
    return errors;
  } catch (const Error& e) {
    return e.what();
  }
}

namespace {

// The variant pack entries both passes share: the inputs, out and lse, ALiBi's
// slopes and the samples' positions where given, and the scalars (host floats
// that must outlive the run).
std::vector<std::pair<int64_t, const void*>> shared_tensors(const bf16* qkv, const bf16* out, const float* lse,
                                                            const float* alibi_slopes, const AttentionDims& dims,
                                                            const float& scale, const float& fill) {
  const Layout l(dims);
  std::vector<std::pair<int64_t, const void*>> tensors{
      {kQ, qkv + l.q_offset}, {kK, qkv + l.k_offset}, {kV, qkv + l.v_offset}, {kO, out},
      {kStats, lse},          {kScale, &scale},       {kFill, &fill}};
  if (alibi_slopes != nullptr) tensors.emplace_back(kSlopes, alibi_slopes);
  if (dims.positions != nullptr) tensors.emplace_back(kPositions, dims.positions);
  return tensors;
}

}  // namespace

bool cudnn_attention_forward(const bf16* qkv, bf16* out, float* lse, const float* alibi_slopes,
                             const AttentionDims& dims) {
  if (!takes(dims, {qkv, out, lse, alibi_slopes})) return false;
  const float scale = float(dims.scale), fill = mask_fill();
  return run_plan(false, variant_of(alibi_slopes != nullptr, dims), dims,
                  shared_tensors(qkv, out, lse, alibi_slopes, dims, scale, fill));
}

bool cudnn_attention_backward(const bf16* d_out, const bf16* qkv, const bf16* out, const float* lse,
                              const float* alibi_slopes, bf16* d_qkv, const AttentionDims& dims) {
  if (!takes(dims, {d_out, qkv, out, lse, alibi_slopes, d_qkv})) return false;
  const float scale = float(dims.scale), fill = mask_fill(), one = 1.0f;
  const Layout l(dims);
  auto tensors = shared_tensors(qkv, out, lse, alibi_slopes, dims, scale, fill);
  tensors.insert(tensors.end(), {{kOne, &one},
                                 {kDO, d_out},
                                 {kDQ, d_qkv + l.q_offset},
                                 {kDK, d_qkv + l.k_offset},
                                 {kDV, d_qkv + l.v_offset}});
  return run_plan(true, variant_of(alibi_slopes != nullptr, dims), dims, tensors);
}

}  // namespace hone::kernels::cuda

#endif  // __has_include(<cudnn_graph.h>)
