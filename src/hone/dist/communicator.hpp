#pragma once
// Communicator: the collectives distributed training needs, on Tensors, over one
// group of processes. Backends: LocalCommunicator (a world of one: no MPI at
// all), MpiCommunicator (CPU tensors, Open MPI), NcclCommunicator (CUDA tensors;
// built with CUDA and NCCL). Every call is blocking and collective over the
// group (send/recv: over the pair); a call that a peer never joins ends the job
// after HONE_DIST_TIMEOUT seconds with a message naming that peer (watchdog.hpp).
//
// Reductions are sums. f32 and f64 reduce natively; bf16 is converted to f32,
// reduced in f32 and rounded once at the end (more exact than a bf16 sum at every
// hop of the reduction tree, at twice the bytes on the wire). Collectives that do
// not reduce (all_gather, broadcast, send/recv) move any dtype bit for bit.
#include <memory>
#include <string>
#include <vector>

#include "hone/core/device.hpp"
#include "hone/core/tensor.hpp"

namespace hone::dist {

// A collective in flight (Communicator::start_*). Its tensors must stay untouched
// until it is complete; destroying it waits for that.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  // Lets the backend move data (MPI advances a nonblocking collective only
  // inside MPI calls); true once complete.
  virtual bool test() = 0;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "local", "mpi" or "nccl".
  virtual std::string backend() const = 0;
  // The world ranks of this group's members, in group-rank order.
  virtual const std::vector<int>& world_ranks() const = 0;

  // In place: every rank's `t` becomes the elementwise sum over ranks.
  virtual void all_reduce(const Tensor& t) = 0;
  // `input` holds size() equal chunks; rank r's `output` (one chunk) becomes the
  // sum over ranks of chunk r.
  virtual void reduce_scatter(const Tensor& input, const Tensor& output) = 0;
  // `output` (size() chunks) becomes every rank's `input`, in rank order.
  // `input` may be this rank's own chunk of `output` (in place).
  virtual void all_gather(const Tensor& input, const Tensor& output) = 0;
  // Root's `output` (shaped like `input`) becomes the sum over ranks of `input`;
  // other ranks' `output` is not touched (it may be undefined there).
  virtual void reduce(const Tensor& input, const Tensor& output, int root) = 0;
  // Every rank's `t` becomes root's.
  virtual void broadcast(const Tensor& t, int root) = 0;
  virtual void barrier() = 0;

  // all_reduce, reduce, reduce_scatter and all_gather without waiting, so that computation
  // overlaps the transfer. Here: the blocking call, returned complete; MPI and
  // NCCL override them.
  virtual std::unique_ptr<PendingCollective> start_all_reduce(const Tensor& t);
  virtual std::unique_ptr<PendingCollective> start_reduce(const Tensor& input, const Tensor& output, int root);
  virtual std::unique_ptr<PendingCollective> start_reduce_scatter(const Tensor& input, const Tensor& output);
  virtual std::unique_ptr<PendingCollective> start_all_gather(const Tensor& input, const Tensor& output);
  // Point to point; each send is matched by one recv of the same size and dtype.
  virtual void send(const Tensor& t, int peer) = 0;
  virtual void recv(const Tensor& t, int peer) = 0;

  // Collective: the processes that pass the same color (>= 0) form one new group,
  // ranked by key (ties by rank here), like MPI_Comm_split.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // The world of this process from its launcher's environment (environment.hpp):
  // a LocalCommunicator when the world has one process; otherwise MPI for `cpu`
  // (initialised here) and NCCL for `cuda` (bootstrapped over MPI when an MPI
  // launcher started the job, else over TCP at MASTER_ADDR:MASTER_PORT).
  static std::unique_ptr<Communicator> from_environment(Device device = Device::cpu());
};

// A world of one process: collectives are copies or nothing.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "local"; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  void all_reduce(const Tensor& t) override;
  void reduce_scatter(const Tensor& input, const Tensor& output) override;
  void all_gather(const Tensor& input, const Tensor& output) override;
  void reduce(const Tensor& input, const Tensor& output, int root) override;
  void broadcast(const Tensor& t, int root) override;
  void barrier() override {}
  void send(const Tensor& t, int peer) override;
  void recv(const Tensor& t, int peer) override;
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  std::vector<int> world_ranks_{0};
};

// Argument checks every backend shares; they throw hone::Error naming the call.
void check_chunked(const char* op, const Tensor& whole, const Tensor& chunk, int size);
void check_peer(const char* op, int peer, int rank, int size);
void check_root(const char* op, int root, int size);
// A reduce's root and, on the root, its output.
void check_reduce(const char* op, const Tensor& input, const Tensor& output, int root, int rank, int size);

// The sum over `group` of one number per rank, moved in a tensor on `device`
// (NCCL moves CUDA tensors only). Collective.
double sum_over(Communicator& group, double local, Device device);

// HONE_DIST_TIMEOUT in seconds (default 600): how long a collective may wait for
// its peers before the job is ended.
double collective_timeout_seconds();

}  // namespace hone::dist
