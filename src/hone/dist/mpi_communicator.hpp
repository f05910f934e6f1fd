#pragma once
// The MPI backend: CPU tensors over Open MPI (any MPI-3 library with
// MPI_THREAD_MULTIPLE). MPI is initialised by the first world() and finalised
// when the process exits with status 0; a process that exits with another status
// while MPI is up calls MPI_Abort, so the launcher ends every rank at once instead
// of the others waiting in their next collective.
#include <mpi.h>

#include <memory>

#include "hone/dist/communicator.hpp"

namespace hone::dist {

struct WatchedState;

class MpiCommunicator final : public Communicator {
 public:
  // MPI_COMM_WORLD (a duplicate of it), initialising MPI on first use.
  static std::unique_ptr<MpiCommunicator> world();
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  const std::vector<int>& world_ranks() const override;
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

  MPI_Comm handle() const { return comm_; }

 private:
  MpiCommunicator(MPI_Comm comm, std::string name);

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  // What this rank is doing in this group, shared with the watchdog thread.
  std::shared_ptr<WatchedState> watched_;
};

}  // namespace hone::dist
