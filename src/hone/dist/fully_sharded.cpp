#include "hone/dist/fully_sharded.hpp"

#include <algorithm>

#include "hone/core/error.hpp"
#include "hone/core/profiler.hpp"
#include "hone/ops/ops.hpp"

namespace hone::dist {

FullyShardedParameters::FullyShardedParameters(Communicator& group, ParameterSet& params)
    : group_(group), params_(params) {
  params_.shard(group.rank(), group.size());
}

FullyShardedParameters::~FullyShardedParameters() = default;

Tensor FullyShardedParameters::take(int64_t numel, DType dtype) {
  const auto fits = std::find_if(spare_.begin(), spare_.end(),
                                 [&](const Tensor& t) { return t.numel() == numel && t.dtype() == dtype; });
  if (fits == spare_.end()) return Tensor::empty({numel}, dtype, params_.values().device());
  Tensor t = std::move(*fits);
  spare_.erase(fits);
  return t;
}

void FullyShardedParameters::give_back(Tensor& t) {
  if (t.defined()) spare_.push_back(std::move(t));
  t = Tensor();
}

FullyShardedParameters::Gathered& FullyShardedParameters::start_gather(int unit) {
  Gathered& g = present_[unit];
  const Tensor& stored = params_.values();
  g.values = take(params_.gathered_numel(unit), stored.dtype());
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
    g.compute = take(g.values.numel(), params_.compute_dtype());
    ops::cast(g.values, g.compute);
  }
  params_.attach(unit, g.values, g.compute, g.grads);
}

void FullyShardedParameters::acquire(int unit, bool with_grads, int next) {
  const OpTimer timer("zero3_acquire");  // waiting for the gather, the cast, zeroing gradients
  auto found = present_.find(unit);
  Gathered& g = found != present_.end() ? found->second : start_gather(unit);
  if (with_grads && !g.grads.defined()) {
    g.grads = take(g.values.numel(), g.values.dtype());
    g.grads.zero_();
  }
  complete(unit, g);
  for (const Reduction& r : reducing_) {
    for (const auto& pending : r.pending) pending->test();  // MPI moves data only when called
  }
  // The next unit's gather runs while this one computes.
  if (next >= 0 && next < params_.units() && !present_.contains(next)) start_gather(next);
}

void FullyShardedParameters::release(int unit) {
  const OpTimer timer("zero3_release");  // the previous unit's reduction, starting this one's
  auto found = present_.find(unit);
  HONE_ASSERT(found != present_.end());
  Gathered& g = found->second;
  for (const auto& pending : g.pending) pending->wait();  // a prefetch the model did not use
  if (g.grads.defined()) {
    finish_reductions();  // one unit's reduction in flight at a time bounds the memory held
    Reduction& r = reducing_.emplace_back();
    const Tensor& stored = params_.grads();
    for (const ParameterSet::Group& group : params_.groups()) {
      if (group.unit != unit) continue;
      Tensor sum = take(group.chunk, stored.dtype());
      r.pending.push_back(
          group_.start_reduce_scatter(g.grads.slice(group.gathered, {group.chunk * group_.size()}), sum));
      r.sums.emplace_back(std::move(sum), stored.slice(group.stored, {group.chunk}));
    }
    r.grads = std::move(g.grads);
  }
  params_.detach(unit);
  for (Tensor* t : {&g.values, &g.compute, &g.grads}) give_back(*t);
  present_.erase(found);
}

void FullyShardedParameters::finish_reductions() {
  for (Reduction& r : reducing_) {
    for (const auto& pending : r.pending) pending->wait();
    for (auto& [sum, stored] : r.sums) {
      ops::add_(stored, sum);
      give_back(sum);
    }
    give_back(r.grads);
  }
  reducing_.clear();
}

void FullyShardedParameters::acquire_all() {
  finish_reductions();
  for (int unit = 0; unit < params_.units(); ++unit) {
    if (!present_.contains(unit)) start_gather(unit);
  }
  for (auto& [unit, g] : present_) complete(unit, g);
}

void FullyShardedParameters::release_all() {
  finish_reductions();
  for (auto& [unit, g] : present_) {
    HONE_ASSERT(!g.grads.defined());
    for (const auto& pending : g.pending) pending->wait();
    params_.detach(unit);
    for (Tensor* t : {&g.values, &g.compute}) give_back(*t);
  }
  present_.clear();
}

}  // namespace hone::dist
