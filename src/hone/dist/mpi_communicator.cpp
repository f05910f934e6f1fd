#include "hone/dist/mpi_communicator.hpp"

#include <climits>
#include <vector>

#include "hone/core/error.hpp"
#include "hone/dist/mpi_watchdog.hpp"

namespace hone::dist {

namespace {

void check_cpu(const char* op, const Tensor& t) {
  HONE_CHECK(t.device().is_cpu(), "{}: the MPI backend moves CPU tensors; this one is on {} (CUDA tensors go "
                                  "through NCCL)",
             op, t.device().str());
}

int mpi_count(const char* op, int64_t n) {
  HONE_CHECK(n <= INT_MAX, "{}: {} elements exceed MPI's count limit of {} per call", op, n, INT_MAX);
  return int(n);
}

// The MPI type that sums elements of `dtype`; bf16 is staged through f32 instead.
MPI_Datatype sum_type(const char* op, DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    default: fail("{}: the MPI backend sums f32, bf16, f64, i32 and i64 tensors, not {}", op, dtype_name(dtype));
  }
}

// A type of the element's width, for operations that only move bits.
MPI_Datatype move_type(DType dtype) {
  switch (dtype_size(dtype)) {
    case 1: return MPI_UINT8_T;
    case 2: return MPI_UINT16_T;
    case 4: return MPI_UINT32_T;
    default: return MPI_UINT64_T;
  }
}

std::vector<float> to_f32(const Tensor& t) {
  const bf16* p = t.data<bf16>();
  std::vector<float> out(size_t(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_float(p[i]);
  return out;
}

// The first t.numel() of `values` into t.
void store_bf16(const std::vector<float>& values, const Tensor& t) {
  bf16* p = t.data<bf16>();
  for (size_t i = 0; i < size_t(t.numel()); ++i) p[i] = float_to_bf16(values[i]);
}

std::vector<int> world_ranks_of(MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  MPI_Group group, world;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> ranks(static_cast<size_t>(size)), out(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) ranks[size_t(r)] = r;
  MPI_Group_translate_ranks(group, size, ranks.data(), world, out.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return out;
}

// MPI_Comm_dup, a collective that waits for every rank of `comm`, watched as
// the communicator's own collectives are (a rank stopped while the job starts
// would leave the others waiting here forever). No control communicator exists
// yet to ask the peers over: the watchdog's report names the call alone.
MPI_Comm watched_dup(MPI_Comm comm, const std::string& name) {
  auto creating = std::make_shared<WatchedState>();
  creating->name = name;
  MPI_Comm_rank(comm, &creating->rank);
  creating->world_ranks = world_ranks_of(comm);
  start_watching(creating);
  MPI_Comm copy;
  {
    Watch w(*creating, MpiOp::create, 0);
    MPI_Comm_dup(comm, &copy);
  }
  stop_watching(creating.get());
  return copy;
}

}  // namespace

std::unique_ptr<MpiCommunicator> MpiCommunicator::world() {
  ensure_mpi_initialized();
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(watched_dup(MPI_COMM_WORLD, "world"), "world"));
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name) : comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  watched_ = std::make_shared<WatchedState>();
  watched_->name = std::move(name);
  watched_->rank = rank_;
  watched_->world_ranks = world_ranks_of(comm_);
  watched_->control = watched_dup(comm_, watched_->name);
  MPI_Comm_set_errhandler(watched_->control, MPI_ERRORS_RETURN);
  start_watching(watched_);
}

MpiCommunicator::~MpiCommunicator() {
  stop_watching(watched_.get());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Comm_free(&watched_->control);
  MPI_Comm_free(&comm_);
}

const std::vector<int>& MpiCommunicator::world_ranks() const { return watched_->world_ranks; }

// A nonblocking reduction. bf16 travels as f32 in `staged`, rounded into
// `result` once complete.
class MpiPending final : public PendingCollective {
 public:
  MpiPending(WatchedState& watched, MpiOp op, int64_t count) : watched_(watched), op_(op), count_(count) {}
  ~MpiPending() override {
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  MPI_Request* request() { return &request_; }
  // The MPI type a reduction of `input` sums in. bf16 is staged: its values go
  // to `staged` as f32, which the reduction works on in place, and the first
  // result.numel() of the sum are rounded into `result` once complete (undefined
  // on ranks that receive nothing).
  MPI_Datatype stage_sum(const char* op, const Tensor& input, const Tensor& result) {
    if (input.dtype() != DType::bf16) return sum_type(op, input.dtype());
    staged = to_f32(input);
    this->result = result;
    return MPI_FLOAT;
  }
  bool is_staged() const { return !staged.empty(); }
  std::vector<float> staged;

  bool test() override {
    if (request_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    MPI_Test(&request_, &done, MPI_STATUS_IGNORE);
    if (done) complete();
    return done != 0;
  }
  void wait() override {
    if (request_ == MPI_REQUEST_NULL) return;
    {
      Watch w(watched_, op_, count_, -1, /*begins=*/false);
      MPI_Wait(&request_, MPI_STATUS_IGNORE);
    }
    complete();
  }

 private:
  void complete() {
    if (result.defined()) store_bf16(staged, result);
    result = Tensor();
  }
  Tensor result;  // bf16: where `staged` goes
  WatchedState& watched_;
  MpiOp op_;
  int64_t count_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

std::unique_ptr<PendingCollective> MpiCommunicator::start_all_reduce(const Tensor& t) {
  check_cpu("all_reduce", t);
  const int n = mpi_count("all_reduce", t.numel());
  auto pending = std::make_unique<MpiPending>(*watched_, MpiOp::all_reduce, n);
  const MPI_Datatype type = pending->stage_sum("all_reduce", t, t);
  void* data = pending->is_staged() ? pending->staged.data() : t.raw();
  Watch w(*watched_, MpiOp::all_reduce, n);
  MPI_Iallreduce(MPI_IN_PLACE, data, n, type, MPI_SUM, comm_, pending->request());
  return pending;
}

std::unique_ptr<PendingCollective> MpiCommunicator::start_reduce(const Tensor& input, const Tensor& output,
                                                                 int root) {
  check_cpu("reduce", input);
  check_reduce("reduce", input, output, root, rank_, size_);
  if (rank_ == root) check_cpu("reduce", output);
  const int n = mpi_count("reduce", input.numel());
  auto pending = std::make_unique<MpiPending>(*watched_, MpiOp::reduce, n);
  const bool root_here = rank_ == root;
  const MPI_Datatype type = pending->stage_sum("reduce", input, root_here ? output : Tensor());
  const void* in = input.raw();
  void* out = root_here ? output.raw() : nullptr;
  if (pending->is_staged()) {  // on the root, input and result share the staging buffer
    in = root_here ? MPI_IN_PLACE : pending->staged.data();
    out = root_here ? pending->staged.data() : nullptr;
  }
  Watch w(*watched_, MpiOp::reduce, n);
  MPI_Ireduce(in, out, n, type, MPI_SUM, root, comm_, pending->request());
  return pending;
}

void MpiCommunicator::all_reduce(const Tensor& t) { start_all_reduce(t)->wait(); }

void MpiCommunicator::reduce(const Tensor& input, const Tensor& output, int root) {
  start_reduce(input, output, root)->wait();
}

std::unique_ptr<PendingCollective> MpiCommunicator::start_reduce_scatter(const Tensor& input, const Tensor& output) {
  check_cpu("reduce_scatter", input);
  check_cpu("reduce_scatter", output);
  check_chunked("reduce_scatter", input, output, size_);
  const int n = mpi_count("reduce_scatter", output.numel());
  auto pending = std::make_unique<MpiPending>(*watched_, MpiOp::reduce_scatter, n);
  const MPI_Datatype type = pending->stage_sum("reduce_scatter", input, output);
  const void* in = input.raw();
  void* out = output.raw();
  if (pending->is_staged()) {  // in place: the sum of this rank's chunk lands at the buffer's start
    in = MPI_IN_PLACE;
    out = pending->staged.data();
  }
  Watch w(*watched_, MpiOp::reduce_scatter, n);
  MPI_Ireduce_scatter_block(in, out, n, type, MPI_SUM, comm_, pending->request());
  return pending;
}

void MpiCommunicator::reduce_scatter(const Tensor& input, const Tensor& output) {
  start_reduce_scatter(input, output)->wait();
}

std::unique_ptr<PendingCollective> MpiCommunicator::start_all_gather(const Tensor& input, const Tensor& output) {
  check_cpu("all_gather", input);
  check_cpu("all_gather", output);
  check_chunked("all_gather", output, input, size_);
  const int n = mpi_count("all_gather", input.numel());
  auto pending = std::make_unique<MpiPending>(*watched_, MpiOp::all_gather, n);
  Watch w(*watched_, MpiOp::all_gather, n);
  const bool in_place = input.raw() == output.slice(int64_t(rank_) * input.numel(), input.shape()).raw();
  MPI_Iallgather(in_place ? MPI_IN_PLACE : input.raw(), n, move_type(input.dtype()), output.raw(), n,
                 move_type(input.dtype()), comm_, pending->request());
  return pending;
}

void MpiCommunicator::all_gather(const Tensor& input, const Tensor& output) {
  start_all_gather(input, output)->wait();
}

void MpiCommunicator::broadcast(const Tensor& t, int root) {
  check_cpu("broadcast", t);
  check_root("broadcast", root, size_);
  const int n = mpi_count("broadcast", t.numel());
  Watch w(*watched_, MpiOp::broadcast, n);
  MPI_Bcast(t.raw(), n, move_type(t.dtype()), root, comm_);
}

void MpiCommunicator::barrier() {
  Watch w(*watched_, MpiOp::barrier, 0);
  MPI_Barrier(comm_);
}

void MpiCommunicator::send(const Tensor& t, int peer) {
  check_cpu("send", t);
  check_peer("send", peer, rank_, size_);
  const int n = mpi_count("send", t.numel());
  Watch w(*watched_, MpiOp::send, n, peer);
  MPI_Send(t.raw(), n, move_type(t.dtype()), peer, 0, comm_);
}

void MpiCommunicator::recv(const Tensor& t, int peer) {
  check_cpu("recv", t);
  check_peer("recv", peer, rank_, size_);
  const int n = mpi_count("recv", t.numel());
  Watch w(*watched_, MpiOp::recv, n, peer);
  MPI_Status status;
  MPI_Recv(t.raw(), n, move_type(t.dtype()), peer, 0, comm_, &status);
  int received = 0;
  MPI_Get_count(&status, move_type(t.dtype()), &received);
  HONE_CHECK(received == n, "recv from rank {}: got {} elements into a tensor of {}", peer, received, n);
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  HONE_CHECK(color >= 0, "split: color {} must not be negative", color);
  MPI_Comm comm;
  {
    Watch w(*watched_, MpiOp::split, 0);
    MPI_Comm_split(comm_, color, key, &comm);
  }
  return std::unique_ptr<Communicator>(
      new MpiCommunicator(comm, fmt::format("group {} of {}", color, watched_->name)));
}

}  // namespace hone::dist
