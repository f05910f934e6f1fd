#pragma once
// ParameterSet: a model's named parameters in three flat buffers (master weights,
// gradients, and the compute copy that GEMMs read). The flat layout goes unit by
// unit (a unit is what the model uses together: a layer, the embeddings, the
// output head), and within a unit the weight-decayed parameters come first: each
// (unit, decay) span is one group. ZeRO-3 shards every group over the ranks and
// gathers a unit's groups just before the model uses them.
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hone/core/tensor.hpp"

namespace hone {

// Tensor parallelism (Megatron's column and row split): a weight cut along one
// dimension over `parts` ranks, rank `index` holding part `index` of every
// segment along it. The fused qkv weight's rows are three segments (query, key
// and value heads), so each rank holds whole heads of each.
struct TensorSplit {
  int dim = -1;  // -1: not split (every rank holds all of it); 0: rows; 1: columns
  int parts = 1, index = 0;
  std::vector<int64_t> segments;  // sizes along dim (each a multiple of parts); empty: one segment
};

// A run of elements that a part of a split tensor shares with the whole:
// `count` elements at `whole` in the whole tensor and at `part` in the part.
struct PartRun {
  int64_t whole = 0, part = 0, count = 0;
};
// The runs that make up part `index` of a tensor of shape `whole` split by `split`.
std::vector<PartRun> part_runs(const Shape& whole, const TensorSplit& split, int index);
// The shape of one part.
Shape part_shape(const Shape& whole, const TensorSplit& split);

struct Parameter {
  std::string name;
  Shape shape;
  bool decay = true;  // AdamW applies weight decay (matrices, embeddings; not norms, biases)
  // The model reads it only through `compute` (a GEMM operand, never `value`),
  // so a sharded bf16 set gathers only that copy for training (ZeRO-3).
  bool compute_only = false;
  Tensor value;       // master weights: fp32 (fp64 on the gradient-check path)
  Tensor grad;        // same dtype and shape as value; undefined when frozen
  // ParameterSet::zero_grad() left last step's values in `grad` instead of
  // zeroing it (a pass over every gradient: 20-30 ms of llama_125M's 0.85 s
  // bf16 step on the CPU): the step's first write replaces them or zeroes them
  // first (adds_to_grad, grad_to_add).
  mutable bool grad_stale = false;
  Tensor compute;     // what the forward pass reads: `value` itself, or its bf16 copy
  int unit = 0;       // the parameters a model uses together (Transformer: embeddings, a layer, the head)
  int64_t offset = 0; // position in the flat layout
  // Tensor parallelism: `shape` is this rank's part of a whole of `whole_shape`
  // (equal when not split), which sits at `whole_offset` in the layout of the
  // whole model (what checkpoints and write() speak).
  TensorSplit split;
  Shape whole_shape;
  int64_t whole_offset = 0;
};

// The gradient of p (undefined for none or frozen) for a writer that adds to
// it: zeroed first if zero_grad() left it stale.
const Tensor& grad_to_add(const Parameter* p);
// Whether the writer about to add to p's gradient must add to it: false once
// after zero_grad(), when it overwrites it instead (a GEMM with beta 0) and so
// must write all of it.
bool adds_to_grad(const Parameter* p);
// Zeroes the gradients that nothing wrote since zero_grad() (an adapter or a
// bias this rank does not own): call before anything reads them.
void settle_grads(std::span<Parameter* const> params);

// Where a ParameterSet's units are between uses. The model acquires a unit before
// it reads the unit's parameters and releases it afterwards; a sharded set
// (ZeRO-3, dist/fully_sharded.hpp) gathers the unit from every rank on acquire
// and frees it on release.
class UnitResidency {
 public:
  virtual ~UnitResidency() = default;
  // Makes the unit's parameters readable and, with_grads, gives them zeroed
  // gradients to add to. `next` (-1: none) is the unit the model will acquire
  // next: it may be fetched meanwhile.
  virtual void acquire(int unit, bool with_grads, int next = -1) = 0;
  // The model is done with the unit; gradients it was given are complete.
  virtual void release(int unit) = 0;
};

// Which part of every group a rank stores under ZeRO-3 (world 1: everything).
struct ShardSpec {
  int rank = 0, world = 1;
};

class ParameterSet {
 public:
  // Declares a parameter of shape `whole`, of which this set holds the part
  // `split` says (all of it by default); its storage comes with allocate().
  Parameter& declare(std::string name, const Shape& whole, bool decay, int unit = 0, TensorSplit split = {});
  // Allocates the flat buffers (zeroed) and points every parameter into them.
  // compute_dtype bf16 adds a bf16 copy of the weights; otherwise compute aliases value.
  // Without gradients the set is frozen: no gradient buffer exists at all. The
  // buffers are padded with zeros to a multiple of `pad_multiple` elements, so
  // that ZeRO can cut them into equal shards (collectives need equal chunks).
  // A shard of several ranks allocates only this rank's chunks, as shard() keeps
  // them: the whole model never exists on one rank (write() fills the chunks).
  void allocate(DType master_dtype, DType compute_dtype, Device device, bool with_grads = true,
                int64_t pad_multiple = 1, ShardSpec shard = {});
  bool frozen() const { return !grads_.defined() && !grads_by_unit_; }
  // ZeRO-2: frees the gradient buffer; the set stays trainable, and a residency
  // points each unit's gradients into a buffer of its own (attach_grads) while
  // backward runs.
  void release_grads();
  // Unsharded: [begin, end) of the unit's parameters in the flat layout.
  std::pair<int64_t, int64_t> unit_range(int unit) const;
  // Points the unit's gradients into `grads` (the unit_range's elements), or
  // nowhere when it is undefined.
  void attach_grads(int unit, const Tensor& grads);

  Parameter& get(std::string_view name);
  const Parameter& get(std::string_view name) const;
  const Parameter* find(std::string_view name) const;
  std::deque<Parameter>& all() { return params_; }
  const std::deque<Parameter>& all() const { return params_; }

  // The parameters of one unit that share one weight-decay setting.
  struct Group {
    int64_t offset = 0, count = 0;  // in the flat layout
    bool decay = true;
    int unit = 0;
    // Where the stored buffers (values(), grads()) hold the group: unsharded, the
    // whole group at `offset`; sharded, this rank's chunk (chunk = count / world,
    // rounded up, the last rank's padded with zeros) at `stored`.
    int64_t stored = 0, chunk = 0;
    int64_t gathered = 0;  // sharded: where the group's world·chunk elements start in its unit's gathered buffers
    bool compute_only = false;  // all its parameters are (Parameter::compute_only)
  };
  const std::vector<Group>& groups() const { return groups_; }

  // The stored flat buffers, padding included: the whole layout, or this rank's
  // chunks once sharded.
  const Tensor& values() const { return values_; }
  const Tensor& grads() const { return grads_; }  // undefined when frozen
  const Tensor& compute() const { return compute_; }  // undefined unless a separate copy exists (never sharded)
  int64_t numel() const { return numel_; }  // parameters, without the padding
  DType compute_dtype() const { return compute_dtype_; }

  // A run of the whole model's flat layout, [offset, offset + count), held at
  // `stored` in the stored buffers.
  struct StoredRange {
    int64_t offset = 0, stored = 0, count = 0;
  };
  // What the stored buffers hold of the whole model's layout, padding excluded
  // (a tensor-parallel rank holds its parts of the split parameters).
  std::vector<StoredRange> stored_ranges() const;
  // What the stored buffers hold of this set's own layout (offsets of
  // Parameter::offset; the same as stored_ranges() unless split).
  std::vector<StoredRange> local_ranges() const;
  // Some parameters are split over tensor-parallel ranks.
  bool split() const { return split_; }

  // ZeRO-3: keeps only this rank's chunk of every group in values() and grads()
  // (no compute copy: gathered units are cast). Parameters' tensors are undefined
  // until attach() gives their unit gathered buffers. world 1: nothing changes.
  void shard(int rank, int world);
  // Sets a parameter's master weights from `whole` (its whole_shape, any dtype
  // the master's cast takes, any device): into p.value, or, sharded, into this
  // rank's chunk of it; split, only this rank's part. Call sync_compute() after the last.
  void write(const Parameter& p, const Tensor& whole);
  bool sharded() const { return world_ > 1; }
  int shard_world() const { return world_; }
  int units() const;
  // Elements of a unit's gathered buffers: each of its groups at world·chunk.
  int64_t gathered_numel(int unit) const;
  // The part of them before the compute-only groups (which come last): what a
  // values buffer needs when those groups come as their compute copy alone.
  int64_t gathered_values_numel(int unit) const;
  // Points the unit's parameters into gathered buffers of gathered_numel(unit)
  // elements: master values, the compute copy (when compute_dtype() differs) and
  // gradients (or undefined). Without `compute_only_values` the values of the
  // compute-only groups were not gathered: `values` holds gathered_values_numel
  // elements (undefined when that is 0) and those parameters' values stay
  // undefined. detach() makes them undefined again.
  void attach(int unit, const Tensor& values, const Tensor& compute, const Tensor& grads,
              bool compute_only_values = true);
  void detach(int unit);

  // Starts a step's gradients: marks them stale (Parameter::grad_stale), which
  // the model's backward pass overwrites or zeroes, so that grads() reads zero
  // where nothing added. A sharded set zeroes its stored shard.
  void zero_grad();
  // Refreshes the compute copy from the master weights (after init or loading).
  void sync_compute();

 private:
  // Sharded: each group's chunk size and places (stored, gathered), and the
  // stored buffers (zeroed) of that size.
  void store_shards(int rank, int world, DType master_dtype, Device device, bool with_grads);
  const Group& group_of(const Parameter& p) const;
  // Appends what `local` (local_ranges()) holds of p, in the whole model's layout.
  void append_held(const Parameter& p, const std::vector<StoredRange>& local, std::vector<StoredRange>& held) const;

  std::deque<Parameter> params_;  // a deque keeps references stable while declaring
  std::vector<Group> groups_;
  Tensor values_, grads_, compute_;
  int64_t numel_ = 0;
  DType compute_dtype_ = DType::f32;
  int rank_ = 0, world_ = 1;
  bool split_ = false;
  bool grads_by_unit_ = false;
};

// Copies what `held` (runs of a flat layout and where a buffer stores them)
// holds of the layout's run [src_offset, src_offset + src.numel()) from src into dst.
void copy_held(const Tensor& src, int64_t src_offset, const Tensor& dst,
               const std::vector<ParameterSet::StoredRange>& held);

}  // namespace hone
