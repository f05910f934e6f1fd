#include "hone/dist/communicator.hpp"

#include <cstdlib>
#include <string>

#include "hone/core/error.hpp"
#include "hone/dist/environment.hpp"
#include "hone/dist/mpi_communicator.hpp"
#ifdef HONE_WITH_NCCL
#include "hone/dist/nccl_communicator.hpp"
#endif

namespace hone::dist {

void check_chunked(const char* op, const Tensor& whole, const Tensor& chunk, int size) {
  HONE_CHECK(whole.dtype() == chunk.dtype(), "{}: tensors of {} and {}", op, dtype_name(whole.dtype()),
             dtype_name(chunk.dtype()));
  HONE_CHECK(whole.numel() == chunk.numel() * size,
             "{}: {} elements should be {} chunks of {} (one per rank), got {}", op, whole.shape().str(), size,
             chunk.numel(), whole.numel());
}

void check_peer(const char* op, int peer, int rank, int size) {
  HONE_CHECK(peer >= 0 && peer < size && peer != rank, "{}: peer {} is not another rank of this {}-rank group",
             op, peer, size);
}

void check_root(const char* op, int root, int size) {
  HONE_CHECK(root >= 0 && root < size, "{}: root {} is not a rank of this {}-rank group", op, root, size);
}

namespace {

// What the blocking start_* calls return.
class CompletedCollective final : public PendingCollective {
 public:
  bool test() override { return true; }
  void wait() override {}
};

}  // namespace

std::unique_ptr<PendingCollective> Communicator::start_all_reduce(const Tensor& t) {
  all_reduce(t);
  return std::make_unique<CompletedCollective>();
}

std::unique_ptr<PendingCollective> Communicator::start_reduce(const Tensor& input, const Tensor& output, int root) {
  reduce(input, output, root);
  return std::make_unique<CompletedCollective>();
}

std::unique_ptr<PendingCollective> Communicator::start_reduce_scatter(const Tensor& input, const Tensor& output) {
  reduce_scatter(input, output);
  return std::make_unique<CompletedCollective>();
}

std::unique_ptr<PendingCollective> Communicator::start_all_gather(const Tensor& input, const Tensor& output) {
  all_gather(input, output);
  return std::make_unique<CompletedCollective>();
}

void check_reduce(const char* op, const Tensor& input, const Tensor& output, int root, int rank, int size) {
  check_root(op, root, size);
  if (rank != root) return;
  HONE_CHECK(output.defined() && output.dtype() == input.dtype() && output.numel() == input.numel(),
             "{}: root {} needs an output like its input ({} of {})", op, root, input.shape().str(),
             dtype_name(input.dtype()));
}

double sum_over(Communicator& group, double local, Device device) {
  if (group.size() == 1) return local;
  const Tensor t = Tensor::from(std::vector<double>{local}, {1}).to(device);
  group.all_reduce(t);
  return t.to_vector<double>()[0];
}

double collective_timeout_seconds() {
  const char* value = std::getenv("HONE_DIST_TIMEOUT");
  if (value == nullptr) return 600;
  char* end = nullptr;
  const double seconds = std::strtod(value, &end);
  HONE_CHECK(end != value && *end == '\0' && seconds >= 0,
             "HONE_DIST_TIMEOUT='{}' should be a number of seconds (0: no timeout)", value);
  return seconds;
}

void LocalCommunicator::all_reduce(const Tensor&) {}

void LocalCommunicator::reduce_scatter(const Tensor& input, const Tensor& output) {
  check_chunked("reduce_scatter", input, output, 1);
  output.copy_from(input.view(output.shape()));
}

void LocalCommunicator::all_gather(const Tensor& input, const Tensor& output) {
  check_chunked("all_gather", output, input, 1);
  if (input.raw() != output.raw()) output.copy_from(input.view(output.shape()));
}

void LocalCommunicator::reduce(const Tensor& input, const Tensor& output, int root) {
  check_reduce("reduce", input, output, root, 0, 1);
  output.copy_from(input.view(output.shape()));
}

void LocalCommunicator::broadcast(const Tensor&, int root) { check_root("broadcast", root, 1); }

void LocalCommunicator::send(const Tensor&, int peer) { check_peer("send", peer, 0, 1); }

void LocalCommunicator::recv(const Tensor&, int peer) { check_peer("recv", peer, 0, 1); }

std::unique_ptr<Communicator> LocalCommunicator::split(int color, int) {
  HONE_CHECK(color >= 0, "split: color {} must not be negative", color);
  return std::make_unique<LocalCommunicator>();
}

std::unique_ptr<Communicator> Communicator::from_environment(Device device) {
  const ProcessInfo p = discover_process();
  if (p.world_size == 1) return std::make_unique<LocalCommunicator>();
  if (device.is_cuda()) {
#ifdef HONE_WITH_NCCL
    return NcclCommunicator::world(p, device);
#else
    fail("a {}-process job on {} needs NCCL, and this hone was built without it (HONE_CUDA and NCCL)",
         p.world_size, device.str());
#endif
  }
  // Open MPI forms its world only among processes that its runtime (mpirun, or
  // srun through PMIx) started; processes started some other way each see a world of 1.
  const bool mpi_runtime = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
                           std::getenv("PMI_RANK") != nullptr;
  HONE_CHECK(mpi_runtime || p.launcher == "openmpi",
             "{} says this is rank {} of {}, but no MPI runtime started this process: CPU tensors travel over MPI, "
             "so start the job with hone launch, mpirun or srun --mpi=pmix",
             p.launcher == "slurm" ? "srun" : "RANK/WORLD_SIZE", p.rank, p.world_size);
  auto world = MpiCommunicator::world();
  HONE_CHECK(world->size() == p.world_size && world->rank() == p.rank,
             "the {} environment says rank {} of {}, but MPI's world has this process as rank {} of {} (several "
             "launchers nested? hone launch on several nodes forms CPU worlds only through mpirun or srun)",
             p.launcher, p.rank, p.world_size, world->rank(), world->size());
  return world;
}

}  // namespace hone::dist
