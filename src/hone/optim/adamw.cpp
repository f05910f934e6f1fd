#include "hone/optim/adamw.hpp"

#include <algorithm>
#include <cmath>

namespace hone {

namespace {

int64_t shard_size(const ParameterSet& params, int64_t offset, int64_t count) {
  const int64_t total = params.values().numel();
  if (count < 0) count = total - offset;
  HONE_ASSERT(offset >= 0 && offset + count <= total);
  return count;
}

}  // namespace

AdamW::AdamW(ParameterSet& params, AdamWConfig config, int64_t shard_offset, int64_t shard_count)
    : params_(params),
      config_(config),
      offset_(shard_offset),
      m_(Tensor::zeros({shard_size(params, shard_offset, shard_count)}, params.values().dtype(),
                       params.values().device())),
      v_(Tensor::zeros({shard_size(params, shard_offset, shard_count)}, params.values().dtype(),
                       params.values().device())) {
  HONE_CHECK(config.beta1 >= 0 && config.beta1 < 1 && config.beta2 >= 0 && config.beta2 < 1,
             "optimizer.betas must be in [0, 1), got ({}, {})", config.beta1, config.beta2);
  HONE_CHECK(config.eps > 0, "optimizer.eps must be positive, got {}", config.eps);
  HONE_CHECK(config.weight_decay >= 0, "optimizer.weight_decay must not be negative, got {}", config.weight_decay);
}

void AdamW::step(double lr, double grad_scale, const Tensor& grads) {
  ++step_;
  const int64_t end = offset_ + m_.numel();
  const Tensor shard_grads = grads.defined() ? grads : params_.grads().slice(offset_, {m_.numel()});
  HONE_ASSERT(shard_grads.numel() == m_.numel());
  for (const ParameterSet::Group& g : params_.groups()) {
    // The part of this group's stored span inside the shard.
    const int64_t lo = std::max(g.stored, offset_), hi = std::min(g.stored + g.chunk, end);
    if (lo >= hi) continue;
    ops::AdamWHyper hyper{.lr = lr,
                          .beta1 = config_.beta1,
                          .beta2 = config_.beta2,
                          .eps = config_.eps,
                          .weight_decay = g.decay ? config_.weight_decay : 0.0,
                          .step = step_,
                          .grad_scale = grad_scale};
    const Shape span{hi - lo};
    const Tensor compute = params_.compute().defined() ? params_.compute().slice(lo, span) : Tensor();
    ops::adamw_update(params_.values().slice(lo, span), shard_grads.slice(lo - offset_, span),
                      m_.slice(lo - offset_, span), v_.slice(lo - offset_, span), hyper, compute);
  }
}

bool AdamW::holds_everything() const {
  return !params_.sharded() && !params_.split() && offset_ == 0 && m_.numel() == params_.values().numel();
}

std::vector<ParameterSet::StoredRange> AdamW::moment_ranges() const {
  std::vector<ParameterSet::StoredRange> ranges;
  const int64_t end = offset_ + m_.numel();
  for (const ParameterSet::StoredRange& r : params_.stored_ranges()) {
    const int64_t lo = std::max(r.stored, offset_), hi = std::min(r.stored + r.count, end);
    if (lo < hi) ranges.push_back({.offset = r.offset + (lo - r.stored), .stored = lo - offset_, .count = hi - lo});
  }
  return ranges;
}

double grad_norm(const ParameterSet& params) { return std::sqrt(ops::sum_squares(params.grads())); }

double clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  return std::min(1.0, max_norm / (norm + 1e-6));
}

}  // namespace hone
