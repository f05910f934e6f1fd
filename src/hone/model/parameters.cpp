#include "hone/model/parameters.hpp"

#include <algorithm>

#include "hone/ops/ops.hpp"

namespace hone {

Shape part_shape(const Shape& whole, const TensorSplit& split) {
  if (split.dim < 0) return whole;
  HONE_ASSERT(split.dim < whole.ndim() && split.parts >= 1 && whole[split.dim] % split.parts == 0);
  std::vector<int64_t> dims(whole.begin(), whole.end());
  dims[size_t(split.dim)] /= split.parts;
  return Shape(std::span<const int64_t>(dims));
}

std::vector<PartRun> part_runs(const Shape& whole, const TensorSplit& split, int index) {
  if (split.dim < 0) return {{.whole = 0, .part = 0, .count = whole.numel()}};
  HONE_ASSERT(whole.ndim() <= 2 && index >= 0 && index < split.parts);
  const std::vector<int64_t> segments = split.segments.empty() ? std::vector{whole[split.dim]} : split.segments;
  // Row-major [rows, cols] (a vector is one column): a row split is one run per
  // segment, a column split one run per segment of every row.
  const int64_t rows = whole[0], cols = whole.ndim() == 2 ? whole[1] : 1;
  const int64_t part_cols = split.dim == 1 ? cols / split.parts : cols;
  std::vector<PartRun> runs;
  for (int64_t row = 0; row < (split.dim == 1 ? rows : 1); ++row) {
    int64_t begin = 0, part_begin = 0;  // of the segment, along dim
    for (const int64_t segment : segments) {
      HONE_ASSERT(segment % split.parts == 0);
      const int64_t length = segment / split.parts, from = begin + index * length;
      runs.push_back(split.dim == 0
                         ? PartRun{.whole = from * cols, .part = part_begin * cols, .count = length * cols}
                         : PartRun{.whole = row * cols + from, .part = row * part_cols + part_begin, .count = length});
      begin += segment;
      part_begin += length;
    }
  }
  return runs;
}

Parameter& ParameterSet::declare(std::string name, const Shape& whole, bool decay, int unit, TensorSplit split) {
  HONE_ASSERT(!values_.defined() && find(name) == nullptr && unit >= 0);
  Parameter& p = params_.emplace_back();
  p.name = std::move(name);
  p.shape = part_shape(whole, split);
  p.whole_shape = whole;
  p.decay = decay;
  p.unit = unit;
  split_ = split_ || split.dim >= 0;
  p.split = std::move(split);
  return p;
}

int ParameterSet::units() const {
  int units = 0;
  for (const Parameter& p : params_) units = std::max(units, p.unit + 1);
  return units;
}

void ParameterSet::allocate(DType master_dtype, DType compute_dtype, Device device, bool with_grads,
                            int64_t pad_multiple, ShardSpec shard) {
  HONE_ASSERT(pad_multiple >= 1);
  int64_t total = 0, whole_total = 0;
  for (int unit = 0; unit < units(); ++unit) {
    for (bool decay : {true, false}) {
      Group group{.offset = total, .decay = decay, .unit = unit, .stored = total, .compute_only = true};
      for (Parameter& p : params_) {
        if (p.unit != unit || p.decay != decay) continue;
        group.compute_only = group.compute_only && p.compute_only;
        p.offset = total;
        p.whole_offset = whole_total;
        total += p.shape.numel();
        whole_total += p.whole_shape.numel();
      }
      group.count = group.chunk = total - group.offset;
      if (group.count > 0) groups_.push_back(group);
    }
  }
  numel_ = total;
  compute_dtype_ = compute_dtype;
  if (shard.world > 1) {
    store_shards(shard.rank, shard.world, master_dtype, device, with_grads);
    return;
  }
  const int64_t padded = (total + pad_multiple - 1) / pad_multiple * pad_multiple;
  values_ = Tensor::zeros({padded}, master_dtype, device);
  if (with_grads) grads_ = Tensor::zeros({padded}, master_dtype, device);
  if (compute_dtype != master_dtype) compute_ = Tensor::zeros({padded}, compute_dtype, device);
  for (Parameter& p : params_) {
    p.value = values_.slice(p.offset, p.shape);
    p.grad = grads_.defined() ? grads_.slice(p.offset, p.shape) : Tensor();
    p.compute = compute_.defined() ? compute_.slice(p.offset, p.shape) : p.value;
  }
}

const Parameter* ParameterSet::find(std::string_view name) const {
  for (const Parameter& p : params_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

const Parameter& ParameterSet::get(std::string_view name) const {
  const Parameter* p = find(name);
  HONE_CHECK(p != nullptr, "the model has no parameter named '{}'", name);
  return *p;
}

Parameter& ParameterSet::get(std::string_view name) {
  return const_cast<Parameter&>(static_cast<const ParameterSet*>(this)->get(name));
}

std::vector<ParameterSet::StoredRange> ParameterSet::stored_ranges() const {
  std::vector<StoredRange> local = local_ranges();
  if (!split_) return local;
  std::vector<StoredRange> held;
  for (const Parameter& p : params_) append_held(p, local, held);
  return held;
}

void ParameterSet::append_held(const Parameter& p, const std::vector<StoredRange>& local,
                               std::vector<StoredRange>& held) const {
  for (const PartRun& run : part_runs(p.whole_shape, p.split, p.split.index)) {
    const int64_t begin = p.offset + run.part, end = begin + run.count;  // in the local layout
    for (const StoredRange& r : local) {
      const int64_t lo = std::max(begin, r.offset), hi = std::min(end, r.offset + r.count);
      if (lo < hi) {
        held.push_back({.offset = p.whole_offset + run.whole + (lo - begin), .stored = r.stored + (lo - r.offset),
                        .count = hi - lo});
      }
    }
  }
}

std::vector<ParameterSet::StoredRange> ParameterSet::local_ranges() const {
  if (!sharded()) return {{.offset = 0, .stored = 0, .count = numel_}};
  std::vector<StoredRange> ranges;
  for (const Group& g : groups_) {
    const int64_t begin = int64_t(rank_) * g.chunk, end = std::min(g.count, begin + g.chunk);
    if (begin < end) ranges.push_back({.offset = g.offset + begin, .stored = g.stored, .count = end - begin});
  }
  return ranges;
}

void ParameterSet::store_shards(int rank, int world, DType master_dtype, Device device, bool with_grads) {
  HONE_ASSERT(!sharded() && world > 1 && rank >= 0 && rank < world);
  rank_ = rank;
  world_ = world;
  int64_t stored = 0;
  for (Group& g : groups_) {
    g.chunk = (g.count + world - 1) / world;
    g.stored = stored;
    stored += g.chunk;
  }
  // Within a unit's gathered buffers the compute-only groups come last, so a
  // gather of their compute copy alone needs master values only for the prefix.
  std::vector<int64_t> gathered(size_t(units()), 0);
  for (const bool compute_only : {false, true}) {
    for (Group& g : groups_) {
      if (g.compute_only != compute_only) continue;
      g.gathered = gathered[size_t(g.unit)];
      gathered[size_t(g.unit)] += g.chunk * world;
    }
  }
  values_ = Tensor::zeros({stored}, master_dtype, device);
  grads_ = with_grads ? Tensor::zeros({stored}, master_dtype, device) : Tensor();
  compute_ = Tensor();
  for (Parameter& p : params_) p.value = p.grad = p.compute = Tensor();
}

void ParameterSet::shard(int rank, int world) {
  HONE_ASSERT(values_.defined() && !sharded());
  if (world == 1) return;
  const Tensor whole = values_;
  store_shards(rank, world, whole.dtype(), whole.device(), grads_.defined());
  copy_held(whole, 0, values_, local_ranges());
}

void ParameterSet::write(const Parameter& p, const Tensor& whole) {
  HONE_ASSERT(whole.shape() == p.whole_shape);
  std::vector<StoredRange> held;
  append_held(p, local_ranges(), held);
  copy_held(ops::cast_to(whole, values_.dtype()), p.whole_offset, values_, held);
}

void copy_held(const Tensor& src, int64_t src_offset, const Tensor& dst,
               const std::vector<ParameterSet::StoredRange>& held) {
  const Tensor flat = src.view({src.numel()});
  for (const ParameterSet::StoredRange& r : held) {
    const int64_t lo = std::max(src_offset, r.offset), hi = std::min(src_offset + src.numel(), r.offset + r.count);
    if (lo < hi) dst.slice(r.stored + (lo - r.offset), {hi - lo}).copy_from(flat.slice(lo - src_offset, {hi - lo}));
  }
}

const ParameterSet::Group& ParameterSet::group_of(const Parameter& p) const {
  const auto g = std::find_if(groups_.begin(), groups_.end(),
                              [&](const Group& g) { return g.unit == p.unit && g.decay == p.decay; });
  HONE_ASSERT(g != groups_.end());
  return *g;
}

int64_t ParameterSet::gathered_numel(int unit) const {
  int64_t n = 0;
  for (const Group& g : groups_) n += g.unit == unit ? g.chunk * world_ : 0;
  return n;
}

int64_t ParameterSet::gathered_values_numel(int unit) const {
  int64_t n = 0;
  for (const Group& g : groups_) n += g.unit == unit && !g.compute_only ? g.chunk * world_ : 0;
  return n;
}

void ParameterSet::attach(int unit, const Tensor& values, const Tensor& compute, const Tensor& grads,
                          bool compute_only_values) {
  const int64_t values_numel = compute_only_values ? gathered_numel(unit) : gathered_values_numel(unit);
  HONE_ASSERT(sharded() && (values_numel == 0 || values.numel() == values_numel));
  for (Parameter& p : params_) {
    if (p.unit != unit) continue;
    const Group& g = group_of(p);
    const int64_t at = g.gathered + (p.offset - g.offset);
    p.value = compute_only_values || !g.compute_only ? values.slice(at, p.shape) : Tensor();
    p.compute = compute.defined() ? compute.slice(at, p.shape) : p.value;
    p.grad = grads.defined() ? grads.slice(at, p.shape) : Tensor();
  }
}

void ParameterSet::detach(int unit) {
  for (Parameter& p : params_) {
    if (p.unit == unit) p.value = p.grad = p.compute = Tensor();
  }
}

void ParameterSet::release_grads() {
  HONE_ASSERT(!sharded() && grads_.defined());
  grads_ = Tensor();
  grads_by_unit_ = true;
  for (Parameter& p : params_) p.grad = Tensor();
}

std::pair<int64_t, int64_t> ParameterSet::unit_range(int unit) const {
  HONE_ASSERT(!sharded());
  int64_t begin = numel_, end = 0;
  for (const Group& g : groups_) {
    if (g.unit != unit) continue;
    begin = std::min(begin, g.offset);
    end = std::max(end, g.offset + g.count);
  }
  return begin < end ? std::pair{begin, end} : std::pair<int64_t, int64_t>{0, 0};
}

void ParameterSet::attach_grads(int unit, const Tensor& grads) {
  const int64_t begin = unit_range(unit).first;
  for (Parameter& p : params_) {
    if (p.unit == unit) p.grad = grads.defined() ? grads.slice(p.offset - begin, p.shape) : Tensor();
  }
}

void ParameterSet::zero_grad() {
  if (!grads_.defined()) return;
  if (sharded()) {  // ZeRO-3: the ranks' sums are added into the stored shard
    grads_.zero_();
    return;
  }
  for (Parameter& p : params_) p.grad_stale = p.grad.defined();
}

const Tensor& grad_to_add(const Parameter* p) {
  static const Tensor none;
  if (p == nullptr) return none;
  if (std::exchange(p->grad_stale, false)) p->grad.zero_();
  return p->grad;
}

bool adds_to_grad(const Parameter* p) { return p == nullptr || !std::exchange(p->grad_stale, false); }

void settle_grads(std::span<Parameter* const> params) {
  for (const Parameter* p : params) grad_to_add(p);
}

void ParameterSet::sync_compute() {
  if (compute_.defined()) ops::cast(values_, compute_);
}

}  // namespace hone
