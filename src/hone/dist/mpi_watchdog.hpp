#pragma once
// The watchdog of the MPI backend (internal). MPI has no timeouts: a collective
// that a peer never joins waits forever. Every MpiCommunicator records what it is
// doing in a WatchedState; one thread per process checks them, and when an
// operation has waited HONE_DIST_TIMEOUT seconds it asks the peers, over a
// duplicate communicator kept for this, how far they got. The same thread
// answers such questions from peers, so a rank whose main thread hangs outside
// any collective still says where it is. Then it prints one line naming the
// operation and the ranks that have not joined it, and calls MPI_Abort.
#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hone::dist {

// `create`: a communicator's MPI_Comm_dup, before it has a control communicator.
enum class MpiOp : int { all_reduce, reduce_scatter, all_gather, broadcast, barrier, send, recv, split, reduce, create };

struct WatchedState {
  MPI_Comm control = MPI_COMM_NULL;  // duplicate of the data communicator (none while it is being made)
  std::string name;                  // "world", "group 1 of world", ...
  std::vector<int> world_ranks;      // of the members, by group rank
  int rank = 0;                      // this process's rank in the group
  std::atomic<uint64_t> seq{0};      // collectives begun
  std::atomic<int> op{0}, peer{-1};
  std::atomic<int64_t> count{0};
  std::atomic<int64_t> started_ns{0};  // when the operation in progress began; 0 when idle
  std::atomic<int64_t> last_ns{0};     // when the last operation began
};

// Marks an operation in progress for the lifetime of the object. A collective
// counts as begun once (`begins`): waiting for one started earlier without
// blocking (MPI_Iallreduce, ...) is watched with begins = false.
class Watch {
 public:
  Watch(WatchedState& state, MpiOp op, int64_t count, int peer = -1, bool begins = true);
  ~Watch();

 private:
  WatchedState& state_;
};

// Initialises MPI (once) and starts the watchdog thread.
void ensure_mpi_initialized();
void start_watching(std::shared_ptr<WatchedState> state);
void stop_watching(const WatchedState* state);

}  // namespace hone::dist
