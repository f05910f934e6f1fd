#pragma once
// The NCCL backend: CUDA tensors (built when the CUDA backend and NCCL are found).
// Each process of a multi-process job uses the GPU of its local rank, as torchrun
// does. The NCCL unique id reaches the ranks over MPI when an MPI launcher
// (mpirun, srun --mpi=pmix) started the job, and over one TCP connection per
// rank to rank 0 at MASTER_ADDR:MASTER_PORT when torchrun-style variables say who
// is who (hone launch) or srun ran without PMIx (the rendezvous only hands out the
// id; NCCL does all the communication). Each call queues its collective on the
// communicator's stream, behind everything queued on hone's compute stream so
// far (its tensors' producers); blocking calls then wait for it, start_* calls
// return and let compute go on. A collective that has not finished after
// HONE_DIST_TIMEOUT seconds aborts the NCCL communicator and throws, naming the
// operation. bf16 sums are NCCL's own.
#include <cuda_runtime.h>
#include <nccl.h>

#include <functional>
#include <memory>

#include "hone/dist/communicator.hpp"
#include "hone/dist/environment.hpp"

namespace hone::dist {

class NcclCommunicator final : public Communicator {
 public:
  static std::unique_ptr<NcclCommunicator> world(const ProcessInfo& process, Device device);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  void all_reduce(const Tensor& t) override;
  void reduce_scatter(const Tensor& input, const Tensor& output) override;
  void all_gather(const Tensor& input, const Tensor& output) override;
  void reduce(const Tensor& input, const Tensor& output, int root) override;
  std::unique_ptr<PendingCollective> start_all_reduce(const Tensor& t) override;
  std::unique_ptr<PendingCollective> start_reduce(const Tensor& input, const Tensor& output, int root) override;
  std::unique_ptr<PendingCollective> start_reduce_scatter(const Tensor& input, const Tensor& output) override;
  std::unique_ptr<PendingCollective> start_all_gather(const Tensor& input, const Tensor& output) override;
  void broadcast(const Tensor& t, int root) override;
  void barrier() override;
  void send(const Tensor& t, int peer) override;
  void recv(const Tensor& t, int peer) override;
  std::unique_ptr<Communicator> split(int color, int key) override;

  cudaStream_t stream() const { return stream_; }

 private:
  NcclCommunicator(ncclComm_t comm, int device, std::string name, int world_rank);
  // Queues `call` (an NCCL collective on stream_) after the compute stream's
  // work; returns the collective in flight, which holds `operands` until it has
  // completed (compute work would not wait for NCCL's stream before reusing a
  // block the allocator got back).
  std::unique_ptr<PendingCollective> start(const char* op, std::vector<Tensor> operands,
                                           const std::function<ncclResult_t()>& call);
  // Waits, under the timeout, for `done` (an event recorded after a collective).
  void await(const char* op, cudaEvent_t done);
  // start, then wait for it.
  void finish(const char* op, const std::function<ncclResult_t()>& call);

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t compute_queued_ = nullptr;
  float* scratch_ = nullptr;  // one element, for barrier()
  int device_ = 0, rank_ = 0, size_ = 1;
  std::string name_;
  std::vector<int> world_ranks_;
  double timeout_s_ = 600;
};

}  // namespace hone::dist
