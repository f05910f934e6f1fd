#include "hone/dist/nccl_communicator.hpp"

#include <mpi.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

#include "hone/core/error.hpp"
#include "hone/dist/mpi_watchdog.hpp"
#include "hone/kernels/cuda/check.hpp"
#include "hone/kernels/cuda/runtime.hpp"

namespace hone::dist {

namespace {

void check_cuda(cudaError_t e, const char* what) {
  HONE_CHECK(e == cudaSuccess, "{}: CUDA error {}", what, cudaGetErrorString(e));
}

void check_nccl(ncclResult_t r, const char* what) {
  HONE_CHECK(r == ncclSuccess, "{}: NCCL error {}", what, ncclGetErrorString(r));
}

void check_cuda_tensor(const char* op, const Tensor& t) {
  HONE_CHECK(t.device().is_cuda(), "{}: the NCCL backend moves CUDA tensors; this one is on {}", op,
             t.device().str());
}

ncclDataType_t nccl_type(const char* op, DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
    default: fail("{}: NCCL has no type for {}", op, dtype_name(dtype));
  }
}

// Writes or reads exactly n bytes; false when the peer closed the connection.
bool transfer(int fd, void* data, size_t n, bool write) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t k = write ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k;
    n -= size_t(k);
  }
  return true;
}

// Rank 0 hands the NCCL unique id to every other rank over TCP at MASTER_ADDR:MASTER_PORT.
ncclUniqueId tcp_rendezvous(const ProcessInfo& p, ncclUniqueId id, double timeout_s) {
  HONE_CHECK(!p.master_addr.empty() && p.master_port > 0,
             "rank {} of {}: the NCCL rendezvous needs MASTER_ADDR and MASTER_PORT", p.rank, p.world_size);
  const std::string port = std::to_string(p.master_port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = p.rank == 0 ? AI_PASSIVE : 0;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(p.rank == 0 ? nullptr : p.master_addr.c_str(), port.c_str(), &hints, &found);
  HONE_CHECK(rc == 0, "NCCL rendezvous: cannot resolve {}:{}: {}", p.master_addr, port, gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found, freeaddrinfo);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  if (p.rank == 0) {
    const int listener = ::socket(found->ai_family, found->ai_socktype, found->ai_protocol);
    const int one = 1;
    ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    HONE_CHECK(::bind(listener, found->ai_addr, found->ai_addrlen) == 0 && ::listen(listener, 128) == 0,
               "NCCL rendezvous: rank 0 cannot listen on port {}: {}", port, std::strerror(errno));
    for (int served = 1; served < p.world_size; ++served) {
      pollfd waiting{listener, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      const int wait_ms = timeout_s > 0 ? int(std::max<int64_t>(0, left.count())) : -1;  // 0: no timeout
      HONE_CHECK(::poll(&waiting, 1, wait_ms) == 1,
                 "rank 0: only {} of the other {} ranks reached the NCCL rendezvous on port {} within {:.0f} s "
                 "(HONE_DIST_TIMEOUT)",
                 served - 1, p.world_size - 1, port, timeout_s);
      const int fd = ::accept(listener, nullptr, nullptr);
      HONE_CHECK(fd >= 0, "NCCL rendezvous: accept failed: {}", std::strerror(errno));
      transfer(fd, &id, sizeof id, true);
      ::close(fd);
    }
    ::close(listener);
    return id;
  }
  while (true) {
    const int fd = ::socket(found->ai_family, found->ai_socktype, found->ai_protocol);
    if (::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
      const bool ok = transfer(fd, &id, sizeof id, false);
      ::close(fd);
      HONE_CHECK(ok, "NCCL rendezvous: rank 0 at {}:{} closed the connection before sending the id",
                 p.master_addr, port);
      return id;
    }
    ::close(fd);
    HONE_CHECK(timeout_s <= 0 || std::chrono::steady_clock::now() < deadline,
               "rank {}: rank 0 did not open the NCCL rendezvous at {}:{} within {:.0f} s (HONE_DIST_TIMEOUT)",
               p.rank, p.master_addr, port, timeout_s);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace

std::unique_ptr<NcclCommunicator> NcclCommunicator::world(const ProcessInfo& p, Device device) {
  const int index = rank_device(p, device).index;
  // hone's own kernels and allocations must run on this GPU too: its runtime
  // would otherwise start on cuda:0 at first use (it throws if already elsewhere).
  kernels::cuda::set_device(index);
  check_cuda(cudaSetDevice(index), "selecting the GPU of this rank");
  ncclUniqueId id{};
  if (p.rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  // torchrun-style ranks (hone launch) meet over TCP even where mpirun started them: on several
  // nodes each node's mpirun forms a separate MPI world.
  const bool mpi_runtime = p.launcher == "openmpi" || std::getenv("PMIX_RANK") != nullptr ||
                           std::getenv("PMI_RANK") != nullptr;
  if (p.launcher != "torchrun" && mpi_runtime) {
    ensure_mpi_initialized();
    // A launcher MPI does not speak (srun --mpi=pmi2 with Open MPI 5) leaves each
    // process a world of its own: the broadcast would hand the others no id and
    // rank 0 would wait in ncclCommInitRank for ever.
    int mpi_size = 0, mpi_rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
    MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
    HONE_CHECK(mpi_size == p.world_size && mpi_rank == p.rank,
               "the {} environment says rank {} of {}, but MPI's world has this process as rank {} of {}: MPI cannot "
               "hand out NCCL's id (with srun, use --mpi=pmix; or start the ranks with hone launch)",
               p.launcher, p.rank, p.world_size, mpi_rank, mpi_size);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  } else {
    id = tcp_rendezvous(p, id, collective_timeout_seconds());
  }
  ncclComm_t comm;
  check_nccl(ncclCommInitRank(&comm, p.world_size, id, p.rank), "ncclCommInitRank");
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, index, "world", p.rank));
}

NcclCommunicator::NcclCommunicator(ncclComm_t comm, int device, std::string name, int world_rank)
    : comm_(comm), device_(device), name_(std::move(name)), timeout_s_(collective_timeout_seconds()) {
  check_nccl(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank");
  check_nccl(ncclCommCount(comm_, &size_), "ncclCommCount");
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cuda(cudaEventCreateWithFlags(&compute_queued_, cudaEventDisableTiming), "cudaEventCreate");
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&scratch_), sizeof(float)), "cudaMalloc");
  // The members' world ranks, for messages: each rank's own, gathered.
  world_ranks_.assign(size_t(size_), world_rank);
  int* buffer = nullptr;
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&buffer), sizeof(int) * size_t(size_ + 1)), "cudaMalloc");
  // On the collective's stream: a plain cudaMemcpy from pageable memory may return before its data landed.
  check_cuda(cudaMemcpyAsync(buffer + size_, &world_rank, sizeof(int), cudaMemcpyHostToDevice, stream_),
             "cudaMemcpyAsync");
  finish("gathering the world ranks",
         [&] { return ncclAllGather(buffer + size_, buffer, 1, ncclInt32, comm_, stream_); });
  check_cuda(cudaMemcpy(world_ranks_.data(), buffer, sizeof(int) * size_t(size_), cudaMemcpyDeviceToHost),
             "cudaMemcpy");
  cudaFree(buffer);
}

NcclCommunicator::~NcclCommunicator() {
  // Unwinding from an error, the peers may never join the collectives still
  // queued, and ncclCommDestroy would wait for them: abort instead.
  if (comm_ != nullptr) {
    if (std::uncaught_exceptions() > 0) ncclCommAbort(comm_);
    else ncclCommDestroy(comm_);
  }
  if (compute_queued_ != nullptr) cudaEventDestroy(compute_queued_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (scratch_ != nullptr) cudaFree(scratch_);
}

namespace {

// A collective queued on the communicator's stream; `done` is recorded after it.
// Work queued on the compute stream later does not wait for it: the host does,
// in wait(), before it queues anything that reads the result.
class NcclPending final : public PendingCollective {
 public:
  NcclPending(std::function<void(const char*, cudaEvent_t)> await, const char* op, cudaStream_t stream,
              std::vector<Tensor> operands, double timeout_s)
      : await_(std::move(await)), op_(op), operands_(std::move(operands)), timeout_s_(timeout_s) {
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(done_, stream), "cudaEventRecord");
  }
  ~NcclPending() override {
    // The collective may still use its tensors: wait for it, but not for ever.
    // This also runs while an error unwinds, when a peer may be gone; the
    // communicator (possibly destroyed already) is not touched here.
    const auto start = std::chrono::steady_clock::now();
    while (cudaEventQuery(done_) == cudaErrorNotReady &&
           (timeout_s_ <= 0 ||
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < timeout_s_)) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    cudaEventDestroy(done_);
  }
  bool test() override { return cudaEventQuery(done_) != cudaErrorNotReady; }
  void wait() override { await_(op_, done_); }

 private:
  std::function<void(const char*, cudaEvent_t)> await_;
  const char* op_;
  std::vector<Tensor> operands_;  // their storage outlives the collective
  double timeout_s_;
  cudaEvent_t done_ = nullptr;
};

}  // namespace

std::unique_ptr<PendingCollective> NcclCommunicator::start(const char* op, std::vector<Tensor> operands,
                                                           const std::function<ncclResult_t()>& call) {
  // The tensors come from work queued on hone's compute stream: NCCL's stream
  // waits for all of it first.
  check_cuda(cudaEventRecord(compute_queued_, kernels::cuda::stream()), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(stream_, compute_queued_, 0), "cudaStreamWaitEvent");
  check_nccl(call(), op);
  return std::make_unique<NcclPending>([this](const char* what, cudaEvent_t done) { await(what, done); }, op,
                                       stream_, std::move(operands), timeout_s_);
}

void NcclCommunicator::finish(const char* op, const std::function<ncclResult_t()>& call) {
  start(op, {}, call)->wait();  // the caller's operands outlive the wait
}

void NcclCommunicator::await(const char* op, cudaEvent_t done) {
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    const cudaError_t state = cudaEventQuery(done);
    if (state == cudaSuccess) return;
    HONE_CHECK(state == cudaErrorNotReady, "{} in {}: CUDA error {}", op, name_, cudaGetErrorString(state));
    // Once aborted (an earlier failure), the communicator's operations end
    // without it: the event alone is waited for.
    ncclResult_t async = ncclSuccess;
    if (comm_ != nullptr) ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
      fail("rank {}: {} in {} failed: NCCL error {}", world_ranks_[size_t(rank_)], op, name_,
           ncclGetErrorString(async));
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout_s_ > 0 && waited > timeout_s_) {
      if (comm_ != nullptr) ncclCommAbort(comm_);
      comm_ = nullptr;
      fail("rank {}: {} in {} did not complete within {:.0f} s (HONE_DIST_TIMEOUT): a peer is hung or dead",
           world_ranks_[size_t(rank_)], op, name_, timeout_s_);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

std::unique_ptr<PendingCollective> NcclCommunicator::start_all_reduce(const Tensor& t) {
  check_cuda_tensor("all_reduce", t);
  return start("all_reduce", {t}, [&] {
    return ncclAllReduce(t.raw(), t.raw(), size_t(t.numel()), nccl_type("all_reduce", t.dtype()), ncclSum, comm_,
                         stream_);
  });
}

std::unique_ptr<PendingCollective> NcclCommunicator::start_reduce(const Tensor& input, const Tensor& output, int root) {
  check_cuda_tensor("reduce", input);
  check_reduce("reduce", input, output, root, rank_, size_);
  if (rank_ == root) check_cuda_tensor("reduce", output);
  return start("reduce", {input, output}, [&] {
    return ncclReduce(input.raw(), rank_ == root ? output.raw() : nullptr, size_t(input.numel()),
                      nccl_type("reduce", input.dtype()), ncclSum, root, comm_, stream_);
  });
}

void NcclCommunicator::all_reduce(const Tensor& t) { start_all_reduce(t)->wait(); }

std::unique_ptr<PendingCollective> NcclCommunicator::start_reduce_scatter(const Tensor& input, const Tensor& output) {
  check_cuda_tensor("reduce_scatter", input);
  check_cuda_tensor("reduce_scatter", output);
  check_chunked("reduce_scatter", input, output, size_);
  return start("reduce_scatter", {input, output}, [&] {
    return ncclReduceScatter(input.raw(), output.raw(), size_t(output.numel()),
                             nccl_type("reduce_scatter", input.dtype()), ncclSum, comm_, stream_);
  });
}

void NcclCommunicator::reduce_scatter(const Tensor& input, const Tensor& output) {
  start_reduce_scatter(input, output)->wait();
}

std::unique_ptr<PendingCollective> NcclCommunicator::start_all_gather(const Tensor& input, const Tensor& output) {
  check_cuda_tensor("all_gather", input);
  check_cuda_tensor("all_gather", output);
  check_chunked("all_gather", output, input, size_);
  return start("all_gather", {input, output}, [&] {
    return ncclAllGather(input.raw(), output.raw(), size_t(input.numel()), nccl_type("all_gather", input.dtype()),
                         comm_, stream_);
  });
}

void NcclCommunicator::all_gather(const Tensor& input, const Tensor& output) {
  start_all_gather(input, output)->wait();
}

void NcclCommunicator::reduce(const Tensor& input, const Tensor& output, int root) {
  start_reduce(input, output, root)->wait();
}

void NcclCommunicator::broadcast(const Tensor& t, int root) {
  check_cuda_tensor("broadcast", t);
  check_root("broadcast", root, size_);
  finish("broadcast", [&] {
    return ncclBroadcast(t.raw(), t.raw(), size_t(t.numel()), nccl_type("broadcast", t.dtype()), root, comm_, stream_);
  });
}

void NcclCommunicator::barrier() {
  // NCCL has no barrier: a one-element all_reduce orders the ranks the same way.
  finish("barrier", [&] { return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_); });
}

void NcclCommunicator::send(const Tensor& t, int peer) {
  check_cuda_tensor("send", t);
  check_peer("send", peer, rank_, size_);
  finish("send",
         [&] { return ncclSend(t.raw(), size_t(t.numel()), nccl_type("send", t.dtype()), peer, comm_, stream_); });
}

void NcclCommunicator::recv(const Tensor& t, int peer) {
  check_cuda_tensor("recv", t);
  check_peer("recv", peer, rank_, size_);
  finish("recv",
         [&] { return ncclRecv(t.raw(), size_t(t.numel()), nccl_type("recv", t.dtype()), peer, comm_, stream_); });
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  HONE_CHECK(color >= 0, "split: color {} must not be negative", color);
  ncclComm_t comm;
  check_nccl(ncclCommSplit(comm_, color, key, &comm, nullptr), "ncclCommSplit");
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(comm, device_, fmt::format("group {} of {}", color, name_), world_ranks_[size_t(rank_)]));
}

}  // namespace hone::dist
