#include "hone/dist/buffer_pool.hpp"

#include <algorithm>
#include <bit>

#include "hone/core/error.hpp"
#include "hone/ops/ops.hpp"

namespace hone::dist {

namespace {

int64_t size_class(int64_t numel) {
  const int64_t granule = int64_t(1) << std::max(0, int(std::bit_width(uint64_t(numel))) - 5);
  return (numel + granule - 1) / granule * granule;
}

}  // namespace

Tensor BufferPool::take(int64_t numel, DType dtype) {
  const int64_t capacity = size_class(numel);
  const auto fits = std::find_if(spare_.begin(), spare_.end(),
                                 [&](const Tensor& t) { return t.numel() == capacity && t.dtype() == dtype; });
  if (fits != spare_.end()) {
    lent_.push_back(std::move(*fits));
    spare_.erase(fits);
  } else {
    lent_.push_back(Tensor::empty({capacity}, dtype, device_));
  }
  return lent_.back().slice(0, {numel});
}

void BufferPool::give_back(Tensor& view) {
  if (!view.defined()) return;
  const auto buffer = std::find_if(lent_.begin(), lent_.end(), [&](const Tensor& b) { return b.raw() == view.raw(); });
  HONE_ASSERT(buffer != lent_.end());
  spare_.push_back(std::move(*buffer));
  lent_.erase(buffer);
  view = Tensor();
}

void GradientReduction::finish(BufferPool& buffers) {
  for (const auto& p : pending) p->wait();
  for (auto& [sum, into] : sums) {
    ops::add_(into, sum);
    buffers.give_back(sum);
  }
  for (Tensor& g : grads) buffers.give_back(g);
}

}  // namespace hone::dist
