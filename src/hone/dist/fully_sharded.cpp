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

FullyShardedParameters::Gathered& FullyShardedParameters::start_gather(Key key) {
  const ParameterSet& set = *sets_[key.first];
  Gathered& g = present_[key];
  const Tensor& stored = set.values();
  g.values = buffers_.take(set.gathered_numel(key.second), stored.dtype());
  for (const ParameterSet::Group& group : set.groups()) {
    if (group.unit != key.second) continue;
    g.pending.push_back(group_.start_all_gather(stored.slice(group.stored, {group.chunk}),
                                                g.values.slice(group.gathered, {group.chunk * group_.size()})));
  }
  return g;
}

void FullyShardedParameters::complete(Key key, Gathered& g) {
  ParameterSet& set = *sets_[key.first];
  for (const auto& pending : g.pending) pending->wait();
  g.pending.clear();
  if (!g.compute.defined() && set.compute_dtype() != g.values.dtype()) {
    g.compute = buffers_.take(g.values.numel(), set.compute_dtype());
    ops::cast(g.values, g.compute);
  }
  set.attach(key.second, g.values, g.compute, g.grads);
}

void FullyShardedParameters::acquire(int unit, bool with_grads, int next) {
  const OpTimer timer("zero3_acquire");  // waiting for the gather, the cast, zeroing gradients
  for (size_t i : sets_of(unit)) {
    const Key key{i, unit};
    auto found = present_.find(key);
    Gathered& g = found != present_.end() ? found->second : start_gather(key);
    if (with_grads && !sets_[i]->frozen() && !g.grads.defined()) {
      g.grads = buffers_.take(g.values.numel(), g.values.dtype());
      g.grads.zero_();
    }
    complete(key, g);
  }
  for (const GradientReduction& r : reducing_) {
    for (const auto& pending : r.pending) pending->test();  // MPI moves data only when called
  }
  // The next unit's gather runs while this one computes.
  for (size_t i : sets_of(next)) {
    if (!present_.contains({i, next})) start_gather({i, next});
  }
}

void FullyShardedParameters::release(int unit) {
  const OpTimer timer("zero3_release");  // the previous unit's reduction, starting this one's
  const std::vector<size_t> holding = sets_of(unit);
  bool with_grads = false;
  for (size_t i : holding) {
    auto found = present_.find({i, unit});
    HONE_ASSERT(found != present_.end());
    for (const auto& pending : found->second.pending) pending->wait();  // a prefetch the model did not use
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

void FullyShardedParameters::acquire_all(bool keep) {
  finish_reductions();
  for (size_t i = 0; i < sets_.size(); ++i) {
    for (int unit = 0; unit < sets_[i]->units(); ++unit) {
      const Key key{i, unit};
      if (sets_[i]->gathered_numel(unit) == 0 || present_.contains(key)) continue;
      Gathered& g = start_gather(key);
      if (keep) continue;
      for (const auto& pending : g.pending) pending->wait();
      buffers_.give_back(g.values);
      present_.erase(key);
    }
  }
  for (auto& [key, g] : present_) complete(key, g);
}

void FullyShardedParameters::release_all() {
  finish_reductions();
  for (auto& [key, g] : present_) {
    HONE_ASSERT(!g.grads.defined());
    for (const auto& pending : g.pending) pending->wait();
    sets_[key.first]->detach(key.second);
    for (Tensor* t : {&g.values, &g.compute}) buffers_.give_back(*t);
  }
  present_.clear();
}

}  // namespace hone::dist
