#pragma once
// ZeRO stage 2's gradients: each rank keeps only its shard of them (a
// contiguous 1/ranks of the trained set's padded flat layout), never all of
// them. While backward runs, a unit's gradients (a layer's, the embeddings',
// the output head's) live in a buffer of their own; when the model releases
// the unit, each rank's part of them is reduced to that rank (one nonblocking
// reduce per owner) and added to its shard, on every micro-batch, and the
// buffer serves the next unit.
#include <map>
#include <memory>
#include <vector>

#include "hone/dist/buffer_pool.hpp"
#include "hone/dist/communicator.hpp"
#include "hone/model/parameters.hpp"

namespace hone::dist {

class ShardedGradients final : public UnitResidency {
 public:
  // Releases `params`' gradient buffer (the trained set, unsharded); `shard`
  // holds elements [offset, offset + shard.numel()) of the padded layout, where
  // the sums add up.
  ShardedGradients(Communicator& group, ParameterSet& params, Tensor shard, int64_t offset);
  ~ShardedGradients() override;

  // With gradients, gives the unit a zeroed buffer for them (the first such
  // acquire after finish() also zeroes the shard: a new step's sum).
  void acquire(int unit, bool with_grads, int next = -1) override;
  // Starts the reduction of the unit's gradients, if it has any, after
  // finishing the previous unit's (one in flight bounds the memory).
  void release(int unit) override;
  // Waits for the reductions in flight and adds them in; returns the shard,
  // which now holds the step's sum over ranks and micro-batches.
  const Tensor& finish();

 private:
  void finish_reductions();

  Communicator& group_;
  ParameterSet& params_;
  Tensor shard_;
  int64_t offset_;
  std::map<int, Tensor> present_;  // units whose gradients backward is computing
  std::vector<GradientReduction> reducing_;
  BufferPool buffers_;
  bool new_sum_ = true;
};

}  // namespace hone::dist
