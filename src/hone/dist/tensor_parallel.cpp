#include "hone/dist/tensor_parallel.hpp"

#include "hone/core/error.hpp"

namespace hone::dist {

Tensor gather_whole(const Parameter& p, const Tensor& part, Communicator& group) {
  if (p.split.dim < 0) return part;
  HONE_ASSERT(p.split.parts == group.size() && part.shape() == p.shape);
  const int64_t n = part.numel();
  const Tensor parts = Tensor::empty({n * group.size()}, part.dtype(), part.device());
  group.all_gather(part, parts);
  const Tensor whole = Tensor::empty(p.whole_shape, part.dtype(), part.device());
  const Tensor flat = whole.view({whole.numel()});
  for (int index = 0; index < group.size(); ++index) {
    for (const PartRun& run : part_runs(p.whole_shape, p.split, index)) {
      flat.slice(run.whole, {run.count}).copy_from(parts.slice(index * n + run.part, {run.count}));
    }
  }
  return whole;
}

}  // namespace hone::dist
