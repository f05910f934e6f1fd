#pragma once
// ZeRO stage 3 (PyTorch's FSDP full shard): each rank stores only its chunk of
// every group of a ParameterSet (master weights, gradients, and so the
// optimizer's moments); a unit's parameters are gathered from every rank just
// before the model uses them and freed right after. Forward gathers each layer
// while the previous one computes (the model names the unit it needs next);
// backward gathers them again, in reverse, and each layer's gradients are
// reduce-scattered to their owners while the next layer's backward runs.
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
  // Frees the unit; with gradients, first starts their reduction: each rank's
  // chunk of the sum is added to its stored gradients (micro-batches accumulate
  // there) by the next release or finish_reductions().
  void release(int unit) override;
  // Waits for the reductions in flight and adds them in: after backward, before
  // anything reads the stored gradients.
  void finish_reductions();

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
  // A released unit's gradients on their way to their owners.
  struct Reduction {
    Tensor grads;  // the unit's gathered gradients, read until the reduces complete
    std::vector<std::pair<Tensor, Tensor>> sums;  // this rank's sum of a group's chunk, and where it adds
    std::vector<std::unique_ptr<PendingCollective>> pending;
  };
  // Starts gathering a unit's values from every rank.
  Gathered& start_gather(int unit);
  // Waits for a unit's gather, casts the compute copy and points the parameters at it.
  void complete(int unit, Gathered& g);
  // Buffers come from and go back to a free list: every layer gathers buffers of
  // the same sizes, and fresh ones would cost a page fault per 4 KiB each time.
  Tensor take(int64_t numel, DType dtype);
  void give_back(Tensor& t);

  Communicator& group_;
  ParameterSet& params_;
  std::map<int, Gathered> present_;
  std::vector<Reduction> reducing_;
  std::vector<Tensor> spare_;
};

}  // namespace hone::dist
