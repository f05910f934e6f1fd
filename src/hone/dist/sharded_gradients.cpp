#include "hone/dist/sharded_gradients.hpp"

#include <algorithm>

#include "hone/core/error.hpp"
#include "hone/core/profiler.hpp"

namespace hone::dist {

ShardedGradients::ShardedGradients(Communicator& group, ParameterSet& params, Tensor shard, int64_t offset)
    : group_(group), params_(params), shard_(std::move(shard)), offset_(offset), buffers_(shard_.device()) {
  params_.release_grads();
}

ShardedGradients::~ShardedGradients() = default;

void ShardedGradients::acquire(int unit, bool with_grads, int /*next*/) {
  const auto [begin, end] = params_.unit_range(unit);
  if (!with_grads || begin == end || present_.contains(unit)) return;
  if (new_sum_) {
    shard_.zero_();
    new_sum_ = false;
  }
  Tensor grads = buffers_.take(end - begin, shard_.dtype());
  grads.zero_();
  params_.attach_grads(unit, grads);
  present_[unit] = std::move(grads);
}

void ShardedGradients::release(int unit) {
  const auto found = present_.find(unit);
  if (found == present_.end()) return;
  const OpTimer timer("zero2_release");  // the previous unit's reduction, starting this one's
  finish_reductions();
  const auto [begin, end] = params_.unit_range(unit);
  GradientReduction r;
  r.grads.push_back(std::move(found->second));
  present_.erase(found);
  params_.attach_grads(unit, Tensor());
  // Each owner's part of [begin, end) goes to that owner alone.
  const int64_t chunk = shard_.numel();
  for (int64_t owner = begin / chunk; owner * chunk < end; ++owner) {
    const int64_t from = std::max(begin, owner * chunk), to = std::min(end, (owner + 1) * chunk);
    Tensor sum;
    if (owner == group_.rank()) {
      sum = buffers_.take(to - from, shard_.dtype());
      r.sums.emplace_back(sum, shard_.slice(from - offset_, {to - from}));
    }
    r.pending.push_back(group_.start_reduce(r.grads[0].slice(from - begin, {to - from}), sum, int(owner)));
  }
  reducing_.push_back(std::move(r));
}

const Tensor& ShardedGradients::finish() {
  finish_reductions();
  new_sum_ = true;
  return shard_;
}

void ShardedGradients::finish_reductions() {
  for (GradientReduction& r : reducing_) r.finish(buffers_);
  reducing_.clear();
}

}  // namespace hone::dist
