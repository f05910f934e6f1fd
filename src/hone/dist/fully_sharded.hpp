#pragma once
// ZeRO stage 3 (PyTorch's FSDP full shard): each rank stores only its chunk of
// every group of the model's ParameterSets (master weights, gradients, and so
// the optimizer's moments; with LoRA the frozen base and the adapters alike). A
// unit's parameters are gathered from every rank just before the model uses
// them and freed right after. Forward gathers each layer while the previous one
// computes (the model names the unit it needs next); backward gathers them
// again, in reverse, and each layer's gradients are reduce-scattered to their
// owners while the next layer's backward runs.
//
// A gathered unit holds what the unsharded model reads: for an fp32 model its
// master weights; for a bf16 model the bf16 copy of the projections (each rank
// casts its chunk and the casts are gathered: half the bytes of fp32 weights,
// as FSDP's bf16 param_dtype sends) and the fp32 master weights of the rest
// (norms, biases and embeddings read them, as unsharded), with their bf16
// cast. Checkpoints (gather_master) gather fp32 master weights.
#include <map>
#include <memory>
#include <vector>

#include "hone/dist/buffer_pool.hpp"
#include "hone/dist/communicator.hpp"
#include "hone/model/parameters.hpp"

namespace hone::dist {

class FullyShardedParameters final : public UnitResidency {
 public:
  // Shards `sets` (whole on every rank, with the same values) over the group,
  // or takes them already sharded over it (ParameterSet::allocate). A frozen set
  // has no gradients: its units are only gathered.
  FullyShardedParameters(Communicator& group, std::vector<ParameterSet*> sets);
  ~FullyShardedParameters() override;

  void acquire(int unit, bool with_grads, int next = -1) override;
  // Frees the unit; with gradients, first starts their reduction: each rank's
  // chunk of the sum is added to its stored gradients (micro-batches accumulate
  // there) by the next release or finish_reductions().
  void release(int unit) override;
  // Waits for the reductions in flight and adds them in: after backward, before
  // anything reads the stored gradients.
  void finish_reductions();

  // One unit of one of the sets gathered whole, master weights (collective): a
  // checkpoint writes the model a unit at a time. A rank that does not keep it
  // (one that does not write) takes part in the gather and drops it at once.
  // release_all() frees it.
  void gather_master(const ParameterSet& set, int unit, bool keep);
  // Frees whatever is gathered (gradients must have been released first).
  void release_all();
  // Units gathered now, in any set (for tests).
  int gathered_units() const;

 private:
  using Key = std::pair<size_t, int>;  // (set, unit)
  struct Gathered {
    Tensor values, compute, grads;
    // For training: the compute-only groups came as their compute copy alone
    // (values undefined for them), from this rank's chunks cast into `staged`.
    bool compute_only_cast = false;
    std::vector<Tensor> staged;
    bool cast = false;  // the compute copy of the master weights is made
    std::vector<std::unique_ptr<PendingCollective>> pending;  // a prefetch in flight
  };
  // Starts gathering a set's unit from every rank: what training reads, or the
  // master weights (checkpoints).
  Gathered& start_gather(Key key, bool for_training);
  // Waits for the gather and gives back the staged casts.
  void wait_for(Gathered& g);
  // Waits for the gather, casts the compute copy and points the parameters at it.
  void complete(Key key, Gathered& g);
  // Frees a gathered unit without gradients (detached, its buffers given back).
  void drop(Key key);
  // The sets holding parameters of `unit`.
  std::vector<size_t> sets_of(int unit) const;

  Communicator& group_;
  std::vector<ParameterSet*> sets_;
  std::map<Key, Gathered> present_;
  std::vector<GradientReduction> reducing_;
  BufferPool buffers_;  // gathered weights, gradients, reduced chunks
};

}  // namespace hone::dist
