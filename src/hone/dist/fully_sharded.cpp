#include "hone/dist/fully_sharded.hpp"

#include <algorithm>
#include <set>

#include "hone/core/error.hpp"
#include "hone/core/profiler.hpp"
#include "hone/ops/ops.hpp"

namespace hone::dist {

FullyShardedParameters::FullyShardedParameters(Communicator& group, std::vector<ParameterSet*> sets)
    : group_(group), sets_(std::move(sets)), buffers_(sets_.at(0)->values().device()) {
  for (ParameterSet* set : sets_) {
    if (!set->sharded()) set->shard(group.rank(), group.size());
    HONE_ASSERT(set->shard_world() == group.size());
  }
}

FullyShardedParameters::~FullyShardedParameters() = default;

int FullyShardedParameters::gathered_units() const {
  std::set<int> units;
  for (const auto& [key, g] : present_) units.insert(key.second);
  return int(units.size());
}

std::vector<size_t> FullyShardedParameters::sets_of(int unit) const {
  std::vector<size_t> holding;
  for (size_t i = 0; i < sets_.size(); ++i) {
    if (unit >= 0 && unit < sets_[i]->units() && sets_[i]->gathered_numel(unit) > 0) holding.push_back(i);
  }
  return holding;
}

FullyShardedParameters::Gathered& FullyShardedParameters::start_gather(Key key, bool for_training) {
  const ParameterSet& set = *sets_[key.first];
  Gathered& g = present_[key];
  const Tensor& stored = set.values();
  const int64_t numel = set.gathered_numel(key.second);
  g.compute_only_cast = for_training && set.compute_dtype() != stored.dtype();
  const int64_t values_numel = g.compute_only_cast ? set.gathered_values_numel(key.second) : numel;
  if (values_numel > 0) g.values = buffers_.take(values_numel, stored.dtype());
  if (set.compute_dtype() != stored.dtype()) g.compute = buffers_.take(numel, set.compute_dtype());
  for (const ParameterSet::Group& group : set.groups()) {
    if (group.unit != key.second) continue;
    const Tensor chunk = stored.slice(group.stored, {group.chunk});
    const int64_t gathered = group.chunk * group_.size();
    if (g.compute_only_cast && group.compute_only) {
      Tensor& staged = g.staged.emplace_back(buffers_.take(group.chunk, set.compute_dtype()));
      ops::cast(chunk, staged);
      g.pending.push_back(group_.start_all_gather(staged, g.compute.slice(group.gathered, {gathered})));
    } else {
      g.pending.push_back(group_.start_all_gather(chunk, g.values.slice(group.gathered, {gathered})));
    }
  }
  return g;
}

void FullyShardedParameters::wait_for(Gathered& g) {
  for (const auto& pending : g.pending) pending->wait();
  g.pending.clear();
  for (Tensor& staged : g.staged) buffers_.give_back(staged);
  g.staged.clear();
}

void FullyShardedParameters::complete(Key key, Gathered& g) {
  ParameterSet& set = *sets_[key.first];
  wait_for(g);
  if (!g.cast && g.compute.defined()) {  // the compute copy of what came as master weights
    for (const ParameterSet::Group& group : set.groups()) {
      if (group.unit != key.second || (g.compute_only_cast && group.compute_only)) continue;
      const int64_t gathered = group.chunk * group_.size();
      ops::cast(g.values.slice(group.gathered, {gathered}), g.compute.slice(group.gathered, {gathered}));
    }
  }
  g.cast = true;
  set.attach(key.second, g.values, g.compute, g.grads, /*compute_only_values=*/!g.compute_only_cast);
}

void FullyShardedParameters::acquire(int unit, bool with_grads, int next) {
  const OpTimer timer("zero3_acquire");  // waiting for the gather, the cast, zeroing gradients
  for (size_t i : sets_of(unit)) {
    const Key key{i, unit};
    auto found = present_.find(key);
    Gathered& g = found != present_.end() ? found->second : start_gather(key, /*for_training=*/true);
    if (with_grads && !sets_[i]->frozen() && !g.grads.defined()) {
      g.grads = buffers_.take(sets_[i]->gathered_numel(unit), sets_[i]->values().dtype());
      g.grads.zero_();
    }
    complete(key, g);
  }
  for (const GradientReduction& r : reducing_) {
    for (const auto& pending : r.pending) pending->test();  // MPI moves data only when called
  }
  // The next unit's gather runs while this one computes.
  for (size_t i : sets_of(next)) {
    if (!present_.contains({i, next})) start_gather({i, next}, /*for_training=*/true);
  }
}

void FullyShardedParameters::release(int unit) {
  const OpTimer timer("zero3_release");  // the previous unit's reduction, starting this one's
  const std::vector<size_t> holding = sets_of(unit);
  bool with_grads = false;
  for (size_t i : holding) {
    auto found = present_.find({i, unit});
    HONE_ASSERT(found != present_.end());
    wait_for(found->second);  // a prefetch the model did not use
    with_grads = with_grads || found->second.grads.defined();
  }
  // One unit's reduction in flight at a time bounds the memory it holds.
  if (with_grads) finish_reductions();
  GradientReduction r;
  for (size_t i : holding) {
    ParameterSet& set = *sets_[i];
    Gathered& g = present_.at({i, unit});
    if (g.grads.defined()) {
      const Tensor& stored = set.grads();
      for (const ParameterSet::Group& group : set.groups()) {
        if (group.unit != unit) continue;
        Tensor sum = buffers_.take(group.chunk, stored.dtype());
        r.pending.push_back(
            group_.start_reduce_scatter(g.grads.slice(group.gathered, {group.chunk * group_.size()}), sum));
        r.sums.emplace_back(std::move(sum), stored.slice(group.stored, {group.chunk}));
      }
      r.grads.push_back(std::move(g.grads));
    }
    set.detach(unit);
    for (Tensor* t : {&g.values, &g.compute, &g.grads}) buffers_.give_back(*t);
    present_.erase({i, unit});
  }
  if (!r.pending.empty()) reducing_.push_back(std::move(r));
}

void FullyShardedParameters::finish_reductions() {
  for (GradientReduction& r : reducing_) r.finish(buffers_);
  reducing_.clear();
}

void FullyShardedParameters::gather_master(const ParameterSet& set, int unit, bool keep) {
  finish_reductions();
  const auto found = std::find(sets_.begin(), sets_.end(), &set);
  HONE_ASSERT(found != sets_.end());
  const Key key{size_t(found - sets_.begin()), unit};
  if (set.gathered_numel(unit) == 0) return;
  if (const auto found = present_.find(key); found != present_.end()) {
    if (!found->second.compute_only_cast) return;  // the master weights are there
    // Gathered for a forward pass (validation leaves units so): its compute-only
    // groups came as their compute copy alone, so the master weights come anew.
    drop(key);
  }
  Gathered& g = start_gather(key, /*for_training=*/false);
  if (keep) return complete(key, g);
  wait_for(g);
  for (Tensor* t : {&g.values, &g.compute}) buffers_.give_back(*t);
  present_.erase(key);
}

void FullyShardedParameters::drop(Key key) {
  Gathered& g = present_.at(key);
  HONE_ASSERT(!g.grads.defined());
  wait_for(g);
  sets_[key.first]->detach(key.second);
  for (Tensor* t : {&g.values, &g.compute}) buffers_.give_back(*t);
  present_.erase(key);
}

void FullyShardedParameters::release_all() {
  finish_reductions();
  while (!present_.empty()) drop(present_.begin()->first);
}

}  // namespace hone::dist
