#pragma once
// Tensor parallelism's weights whole again: a split parameter's parts (one per
// rank of its tp group, model/parameters.hpp TensorSplit) put together, for
// checkpoints and exports, which store whole tensors.
#include "hone/dist/communicator.hpp"
#include "hone/model/parameters.hpp"

namespace hone::dist {

// Collective over `group` (p's tp group, ranked by part index): the whole
// parameter (p.whole_shape) from every rank's `part` of it (p.shape, e.g.
// p.value), on every rank.
Tensor gather_whole(const Parameter& p, const Tensor& part, Communicator& group);

}  // namespace hone::dist
