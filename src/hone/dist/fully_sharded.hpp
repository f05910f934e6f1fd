#pragma once
// ZeRO stage 3 (PyTorch's FSDP full shard): each rank stores only its chunk of
// every group of a ParameterSet (master weights, gradients, and so the
// optimizer's moments); a unit's parameters are gathered from every rank just
// before the model uses them and freed right after. Forward gathers each layer
// while the previous one computes (the model names the unit it needs next);
// backward gathers them again, in reverse, and each layer's gradients are
// reduce-scattered to their owners as soon as the layer is done.
//
// A gathered unit holds its master weights (exactly what the unsharded model
// reads, fp32) and, for a bf16 model, their bf16 cast: gathering the bf16 copy
// alone would halve the bytes on the wire but change what norms and embeddings
// read.
#include <map>
#include <memory>
#include <vector>

#include "hone/dist/communicator.hpp"
#include "hone/model/parameters.hpp"

namespace hone::dist {

class FullyShardedParameters final : public UnitResidency {
 public:
  // Shards `params` (whole on every rank, with the same values) over the group.
  FullyShardedParameters(Communicator& group, ParameterSet& params);
  ~FullyShardedParameters() override;

  void acquire(int unit, bool with_grads, int next = -1) override;
  // With gradients: reduce-scatters them, adding each rank's chunk to its
  // stored gradients (micro-batches accumulate there), then frees the unit.
  void release(int unit) override;

  // Every unit gathered (collective): checkpoints and exports read whole weights.
  void acquire_all();
  // Frees whatever is gathered (gradients must have been released first).
  void release_all();
  // Units gathered now (for tests).
  int gathered_units() const { return int(present_.size()); }

 private:
  struct Gathered {
    Tensor values, compute, grads;
    std::vector<std::unique_ptr<PendingCollective>> pending;  // a prefetch in flight
  };
  // Starts gathering a unit's values from every rank.
  Gathered& start_gather(int unit);
  // Waits for a unit's gather, casts the compute copy and points the parameters at it.
  void complete(int unit, Gathered& g);

  Communicator& group_;
  ParameterSet& params_;
  std::map<int, Gathered> present_;
};

}  // namespace hone::dist
