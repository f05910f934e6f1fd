#pragma once
// Data parallelism over the data-parallel group of the device mesh, with ZeRO
// stage 0 (every rank holds everything), 1 (each rank keeps the optimizer state
// of one shard of the flat parameter buffer) or 2 (gradients are reduce-scattered
// to the shard's owner, too). Every rank sees different data; gradients are
// summed so that all ranks train on the mean over the global batch.
#include <utility>

#include "hone/dist/communicator.hpp"
#include "hone/model/parameters.hpp"

namespace hone::dist {

class DataParallel {
 public:
  // `device` holds the tensors the group reduces (CPU for MPI, CUDA for NCCL);
  // zero_stage is 0, 1 or 2.
  DataParallel(Communicator& group, int zero_stage, Device device);

  int rank() const { return group_.rank(); }
  int size() const { return group_.size(); }
  int zero_stage() const { return zero_; }
  Communicator& group() const { return group_; }

  // This rank's shard [offset, offset + count) of flat buffers of `padded`
  // elements (a multiple of size()); the whole buffer at ZeRO stage 0.
  std::pair<int64_t, int64_t> shard(int64_t padded) const;
  // The sum over ranks of one number per rank.
  double sum(double local) const;

  // After the backward passes: gradients summed over ranks. Stage 0 and 1: all of
  // params.grads() (the returned tensor views it); stage 2: only this rank's shard,
  // in a buffer of its own (returned).
  Tensor reduce_gradients(const ParameterSet& params);
  // The global L2 norm of what reduce_gradients returned.
  double grad_norm(const Tensor& reduced) const;
  // After the optimizer updated this rank's shard (stages 1 and 2): every rank's
  // shard to every rank, then the compute copy refreshed.
  void gather_parameters(ParameterSet& params);

 private:
  Communicator& group_;
  int zero_;
  Device device_;
  Tensor grad_shard_, value_shard_;  // stage 2 gradient shard; staging for the gather
};

}  // namespace hone::dist
