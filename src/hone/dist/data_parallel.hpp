#pragma once
// Data parallelism over the data-parallel group of the device mesh, with ZeRO
// stage 0 (every rank holds everything), 1 (each rank keeps the optimizer state
// of one shard of the flat parameter buffer), 2 (and only that shard of the
// gradients: sharded_gradients.hpp) or 3 (the parameters themselves are
// sharded: fully_sharded.hpp). Every rank sees different data; gradients are
// summed so that all ranks train on the mean over the global batch.
//
// At stages 0 and 1 the gradients are reduced in buckets while the last
// backward pass of a step runs: the model says when a layer's gradients are
// final, and as soon as final gradients that neighbour each other in the flat
// buffer add up to a bucket, a nonblocking all_reduce starts on them (like
// PyTorch DDP's bucket_cap_mb). Stages 2 and 3 reduce each unit's gradients
// as the model releases it, on every micro-batch.
//
// With tensor parallelism the parameters that every rank of a tp group holds
// whole (norms, embeddings, output head, row-parallel biases) got only this
// rank's rows' share of their gradient: the reduction sums them over the tp
// group too, and the gradient norm counts them once.
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "hone/dist/communicator.hpp"
#include "hone/dist/fully_sharded.hpp"
#include "hone/dist/sharded_gradients.hpp"
#include "hone/model/parameters.hpp"

namespace hone::dist {

class DataParallel {
 public:
  // `device` holds the tensors the group reduces (CPU for MPI, CUDA for NCCL);
  // zero_stage is 0, 1, 2 or 3. bucket_bytes 0: one reduction after backward
  // (stages 2 and 3 reduce each unit's gradients as it is done, whatever the buckets).
  // `tensor_parallel`: this rank's tp group (null: none).
  DataParallel(Communicator& group, int zero_stage, Device device, int64_t bucket_bytes = 0,
               Communicator* tensor_parallel = nullptr);
  ~DataParallel();

  int rank() const { return group_.rank(); }
  int size() const { return group_.size(); }
  int zero_stage() const { return zero_; }
  int64_t bucket_bytes() const { return bucket_bytes_; }
  Communicator& group() const { return group_; }

  // This rank's shard [offset, offset + count) of flat buffers of `padded`
  // elements (a multiple of size()); the whole buffer at ZeRO stage 0, and at
  // stage 3, where the stored buffers are already this rank's.
  std::pair<int64_t, int64_t> shard(int64_t padded) const;
  // Stage 3 on several ranks: shards `sets` (whole and equal on every rank; the
  // trained one among them is what begin_reduction() is given) and returns what
  // the model must acquire their units from; else null.
  FullyShardedParameters* shard_parameters(std::vector<ParameterSet*> sets);
  // Stage 2 on several ranks: keeps only this rank's shard of `trained`'s
  // gradients (its gradient buffer is released) and returns what the model must
  // acquire its units from; else null.
  ShardedGradients* shard_gradients(ParameterSet& trained);
  FullyShardedParameters* fully_sharded() const { return sharded_.get(); }
  // The sum over ranks of one number per rank.
  double sum(double local) const;

  // The reduction of params' gradients over ranks: begin_reduction() before the
  // step's last backward pass, gradients_final() from it as parameters' gradients
  // become final (a layer at a time; optional), finish_reduction() after it.
  void begin_reduction(const ParameterSet& params);
  void gradients_final(std::span<Parameter* const> params);
  // Waits for every reduction. Returns the gradients summed over ranks: stage 0
  // and 1: all of params.grads() (the returned tensor views it); stage 2: only
  // this rank's shard, in a buffer of its own; stage 3: params.grads(), this
  // rank's stored chunks (each layer's were reduce-scattered there during backward).
  Tensor finish_reduction();
  // Collectives started so far by this step's reduction (for tests).
  int64_t buckets_started() const { return buckets_started_; }
  // The global L2 norm of what finish_reduction returned.
  double grad_norm(const Tensor& reduced) const;
  // After the optimizer updated this rank's shard (stages 1 and 2): every rank's
  // shard to every rank, then the compute copy refreshed. Stage 3: gathered
  // copies of the old weights are dropped (the next pass gathers new ones).
  void gather_parameters(ParameterSet& params);

 private:
  // Starts reductions on the runs of final, unsent neighbours that fill a
  // bucket (all remaining runs when `everything`).
  void start_buckets(bool everything);
  // Starts the reduction of flat gradient elements [begin, end).
  void start_bucket(int64_t begin, int64_t end);
  // Tensor parallelism: sums the gradients of the parameters every tp rank
  // holds whole over the tp group, in `reduced` (what finish_reduction returns),
  // a run at a time, all in flight at once.
  void reduce_replicated(const Tensor& reduced);
  // Where those gradients lie in what finish_reduction returns (the layout
  // does not change: found once).
  void find_replicated(const ParameterSet& params);

  struct Slot {
    const Parameter* param;
    bool final = false, sent = false;
  };
  Communicator& group_;
  Communicator* tensor_parallel_;
  int zero_;
  Device device_;
  int64_t bucket_bytes_;
  std::unique_ptr<ShardedGradients> sharded_grads_;  // stage 2
  std::unique_ptr<FullyShardedParameters> sharded_;  // stage 3
  // The reduction in progress: its parameters by flat-buffer offset, its collectives.
  const ParameterSet* reducing_ = nullptr;
  std::vector<Slot> slots_;
  std::vector<std::unique_ptr<PendingCollective>> in_flight_;
  int64_t bucket_elements_ = 0, buckets_started_ = 0;
  // Tensor parallelism: where the tp-replicated gradients lie in what
  // finish_reduction returns, as (index, count).
  std::vector<std::pair<int64_t, int64_t>> replicated_;
};

}  // namespace hone::dist
