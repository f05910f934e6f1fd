#include "hone/dist/fully_sharded.hpp"

#include "hone/core/error.hpp"
#include "hone/ops/ops.hpp"

namespace hone::dist {

FullyShardedParameters::FullyShardedParameters(Communicator& group, ParameterSet& params)
    : group_(group), params_(params) {
  params_.shard(group.rank(), group.size());
}

FullyShardedParameters::~FullyShardedParameters() = default;

FullyShardedParameters::Gathered& FullyShardedParameters::start_gather(int unit) {
  Gathered& g = present_[unit];
  const Tensor& stored = params_.values();
  g.values = Tensor::empty({params_.gathered_numel(unit)}, stored.dtype(), stored.device());
  for (const ParameterSet::Group& group : params_.groups()) {
    if (group.unit != unit) continue;
    g.pending.push_back(group_.start_all_gather(stored.slice(group.stored, {group.chunk}),
                                                g.values.slice(group.gathered, {group.chunk * group_.size()})));
  }
  return g;
}

void FullyShardedParameters::complete(int unit, Gathered& g) {
  for (const auto& pending : g.pending) pending->wait();
  g.pending.clear();
  if (!g.compute.defined() && params_.compute_dtype() != g.values.dtype()) {
    g.compute = Tensor::empty(g.values.shape(), params_.compute_dtype(), g.values.device());
    ops::cast(g.values, g.compute);
  }
  params_.attach(unit, g.values, g.compute, g.grads);
}

void FullyShardedParameters::acquire(int unit, bool with_grads, int next) {
  auto found = present_.find(unit);
  Gathered& g = found != present_.end() ? found->second : start_gather(unit);
  if (with_grads && !g.grads.defined()) g.grads = Tensor::zeros(g.values.shape(), g.values.dtype(), g.values.device());
  complete(unit, g);
  // The next unit's gather runs while this one computes.
  if (next >= 0 && next < params_.units() && !present_.contains(next)) start_gather(next);
}

void FullyShardedParameters::release(int unit) {
  auto found = present_.find(unit);
  HONE_ASSERT(found != present_.end());
  Gathered& g = found->second;
  for (const auto& pending : g.pending) pending->wait();  // a prefetch the model did not use
  if (g.grads.defined()) {
    const Tensor& stored = params_.grads();
    for (const ParameterSet::Group& group : params_.groups()) {
      if (group.unit != unit) continue;
      const Tensor sum = Tensor::empty({group.chunk}, stored.dtype(), stored.device());
      group_.reduce_scatter(g.grads.slice(group.gathered, {group.chunk * group_.size()}), sum);
      ops::add_(stored.slice(group.stored, {group.chunk}), sum);
    }
  }
  params_.detach(unit);
  present_.erase(found);
}

void FullyShardedParameters::acquire_all() {
  for (int unit = 0; unit < params_.units(); ++unit) {
    if (!present_.contains(unit)) start_gather(unit);
  }
  for (auto& [unit, g] : present_) complete(unit, g);
}

void FullyShardedParameters::release_all() {
  for (auto& [unit, g] : present_) {
    HONE_ASSERT(!g.grads.defined());
    for (const auto& pending : g.pending) pending->wait();
    params_.detach(unit);
  }
  present_.clear();
}

}  // namespace hone::dist
