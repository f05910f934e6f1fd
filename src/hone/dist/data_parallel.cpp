#include "hone/dist/data_parallel.hpp"

#include <algorithm>
#include <cmath>

#include "hone/core/error.hpp"
#include "hone/ops/ops.hpp"

namespace hone::dist {

DataParallel::DataParallel(Communicator& group, int zero_stage, Device device, int64_t bucket_bytes,
                           Communicator* tensor_parallel)
    : group_(group),
      tensor_parallel_(tensor_parallel && tensor_parallel->size() > 1 ? tensor_parallel : nullptr),
      zero_(zero_stage),
      device_(device),
      bucket_bytes_(bucket_bytes) {
  HONE_ASSERT(zero_stage >= 0 && zero_stage <= 3);  // the config is checked where it is read (TrainingWorld)
}

DataParallel::~DataParallel() = default;

std::pair<int64_t, int64_t> DataParallel::shard(int64_t padded) const {
  if (zero_ == 0 || zero_ == 3) return {0, padded};
  HONE_ASSERT(padded % size() == 0);
  const int64_t chunk = padded / size();
  return {rank() * chunk, chunk};
}

ShardedGradients* DataParallel::shard_gradients(ParameterSet& trained) {
  if (zero_ == 2 && size() > 1 && !sharded_grads_) {
    const auto [offset, count] = shard(trained.grads().numel());
    const Tensor shard = Tensor::empty({count}, trained.grads().dtype(), trained.grads().device());
    sharded_grads_ = std::make_unique<ShardedGradients>(group_, trained, shard, offset);
  }
  return sharded_grads_.get();
}

FullyShardedParameters* DataParallel::shard_parameters(std::vector<ParameterSet*> sets) {
  if (zero_ == 3 && size() > 1 && !sharded_) sharded_ = std::make_unique<FullyShardedParameters>(group_, std::move(sets));
  return sharded_.get();
}

double DataParallel::sum(double local) const { return sum_over(group_, local, device_); }

void DataParallel::begin_reduction(const ParameterSet& params) {
  HONE_ASSERT(reducing_ == nullptr && !params.frozen());
  reducing_ = &params;
  slots_.clear();
  buckets_started_ = 0;
  if (sharded_ || sharded_grads_) {  // the model's release of each unit reduces its gradients
    bucket_elements_ = 0;
    return;
  }
  for (const Parameter& p : params.all()) slots_.push_back({&p});
  std::sort(slots_.begin(), slots_.end(),
            [](const Slot& a, const Slot& b) { return a.param->offset < b.param->offset; });
  const int64_t element_bytes = int64_t(dtype_size(params.grads().dtype()));
  bucket_elements_ = bucket_bytes_ > 0 ? std::max<int64_t>(1, bucket_bytes_ / element_bytes) : 0;
}

void DataParallel::gradients_final(std::span<Parameter* const> params) {
  HONE_ASSERT(reducing_ != nullptr);
  if (bucket_elements_ == 0) return;
  for (const Parameter* p : params) {
    const auto slot = std::lower_bound(slots_.begin(), slots_.end(), p->offset,
                                       [](const Slot& s, int64_t offset) { return s.param->offset < offset; });
    HONE_ASSERT(slot != slots_.end() && slot->param == p);  // a parameter of the set being reduced
    slot->final = true;
  }
  start_buckets(false);
  for (const auto& pending : in_flight_) pending->test();  // MPI moves data only when called
}

Tensor DataParallel::finish_reduction() {
  HONE_ASSERT(reducing_ != nullptr);
  start_buckets(true);
  for (const auto& pending : in_flight_) pending->wait();
  in_flight_.clear();
  if (sharded_) sharded_->finish_reductions();
  const Tensor reduced = sharded_grads_ ? sharded_grads_->finish() : reducing_->grads();
  if (tensor_parallel_) reduce_replicated(reduced);
  reducing_ = nullptr;
  return reduced;
}

void DataParallel::reduce_replicated(const Tensor& reduced) {
  if (replicated_.empty()) find_replicated(*reducing_);
  for (const auto& [index, count] : replicated_) {
    in_flight_.push_back(tensor_parallel_->start_all_reduce(reduced.slice(index, {count})));
  }
  for (const auto& pending : in_flight_) pending->wait();
  in_flight_.clear();
}

void DataParallel::find_replicated(const ParameterSet& params) {
  // What the reduction returns of the set's layout: all of it, this rank's
  // ZeRO-2 shard, or its ZeRO-3 chunks.
  std::vector<ParameterSet::StoredRange> held = params.local_ranges();
  if (sharded_grads_) {
    const auto [offset, count] = shard(params.values().numel());
    held = {{.offset = offset, .stored = 0, .count = count}};
  }
  // Neighbours merged: a layer's norms lie together, as do the head's projection and norm.
  for (const Parameter& p : params.all()) {
    if (p.split.dim >= 0) continue;
    for (const ParameterSet::StoredRange& r : held) {
      const int64_t lo = std::max(p.offset, r.offset), hi = std::min(p.offset + p.shape.numel(), r.offset + r.count);
      if (lo < hi) replicated_.push_back({r.stored + (lo - r.offset), hi - lo});
    }
  }
  std::sort(replicated_.begin(), replicated_.end());
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (const auto& [index, count] : replicated_) {
    if (!runs.empty() && runs.back().first + runs.back().second == index) {
      runs.back().second += count;
    } else {
      runs.push_back({index, count});
    }
  }
  replicated_ = std::move(runs);
}

void DataParallel::start_buckets(bool everything) {
  // A run is a maximal stretch of neighbouring unsent slots that are final; runs
  // start at the first slot's offset and end where the next slot begins, so that
  // together they cover the whole buffer, padding included.
  const auto ready = [&](const Slot& s) { return !s.sent && (s.final || everything); };
  const size_t n = slots_.size();
  for (size_t i = 0; i < n;) {
    if (!ready(slots_[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    int64_t elements = 0;
    for (; j < n && ready(slots_[j]); ++j) elements += slots_[j].param->shape.numel();
    if (everything || elements >= bucket_elements_) {
      const int64_t end = j == n ? reducing_->grads().numel() : slots_[j].param->offset;
      start_bucket(i == 0 ? 0 : slots_[i].param->offset, end);
      for (size_t k = i; k < j; ++k) slots_[k].sent = true;
    }
    i = j;
  }
}

void DataParallel::start_bucket(int64_t begin, int64_t end) {
  ++buckets_started_;
  if (size() > 1) in_flight_.push_back(group_.start_all_reduce(reducing_->grads().slice(begin, {end - begin})));
}

double DataParallel::grad_norm(const Tensor& reduced) const {
  double local = ops::sum_squares(reduced);
  if (tensor_parallel_) {
    // The tp ranks' parts add up; what each holds whole counts once.
    double replicated = 0;
    for (const auto& [index, count] : replicated_) replicated += ops::sum_squares(reduced.slice(index, {count}));
    local = sum_over(*tensor_parallel_, local - replicated * (1.0 - 1.0 / tensor_parallel_->size()), device_);
  }
  // Stages 2 and 3 hold a shard: its squares add up across ranks; otherwise
  // every rank holds the same full sum.
  return std::sqrt(zero_ >= 2 ? sum(local) : local);
}

void DataParallel::gather_parameters(ParameterSet& params) {
  if (sharded_) sharded_->release_all();
  if (zero_ == 0 || zero_ == 3 || size() == 1) return;
  const Tensor& values = params.values();
  const auto [offset, count] = shard(values.numel());
  group_.all_gather(values.slice(offset, {count}), values);  // in place
  params.sync_compute();
}

}  // namespace hone::dist
