#include "hone/dist/data_parallel.hpp"

#include <cmath>

#include "hone/core/error.hpp"
#include "hone/ops/ops.hpp"

namespace hone::dist {

DataParallel::DataParallel(Communicator& group, int zero_stage, Device device)
    : group_(group), zero_(zero_stage), device_(device) {
  HONE_ASSERT(zero_stage >= 0 && zero_stage <= 2);  // the config is checked where it is read (TrainingWorld)
}

std::pair<int64_t, int64_t> DataParallel::shard(int64_t padded) const {
  if (zero_ == 0) return {0, padded};
  HONE_ASSERT(padded % size() == 0);
  const int64_t chunk = padded / size();
  return {rank() * chunk, chunk};
}

double DataParallel::sum(double local) const {
  if (size() == 1) return local;
  const Tensor t = Tensor::from(std::vector<double>{local}, {1}).to(device_);
  group_.all_reduce(t);
  return t.to_vector<double>()[0];
}

Tensor DataParallel::reduce_gradients(const ParameterSet& params) {
  const Tensor& grads = params.grads();
  if (size() == 1) return grads;
  if (zero_ < 2) {
    group_.all_reduce(grads);
    return grads;
  }
  const auto [offset, count] = shard(grads.numel());
  if (!grad_shard_.defined()) grad_shard_ = Tensor::empty({count}, grads.dtype(), grads.device());
  group_.reduce_scatter(grads, grad_shard_);
  return grad_shard_;
}

double DataParallel::grad_norm(const Tensor& reduced) const {
  const double local = ops::sum_squares(reduced);
  // Stage 2 holds a shard: its squares add up across ranks; otherwise every rank
  // holds the same full sum.
  return std::sqrt(zero_ == 2 ? sum(local) : local);
}

void DataParallel::gather_parameters(ParameterSet& params) {
  if (zero_ == 0 || size() == 1) return;
  const Tensor& values = params.values();
  const auto [offset, count] = shard(values.numel());
  if (!value_shard_.defined()) value_shard_ = Tensor::empty({count}, values.dtype(), values.device());
  value_shard_.copy_from(values.slice(offset, {count}));
  group_.all_gather(value_shard_, values);
  params.sync_compute();
}

}  // namespace hone::dist
