// Every collective of the MPI backend against its definition, run by ctest as
// `mpirun -np 2 mpi_collectives` (written for any number of ranks). Values are
// small multiples of 1/4, so sums are exact in f32, f64 and bf16 alike.
#include <gtest/gtest.h>

#include <cstdlib>

#include "hone/core/error.hpp"
#include "hone/dist/communicator.hpp"
#include "hone/dist/mesh.hpp"

namespace hone::dist {
namespace {

std::unique_ptr<Communicator> world() {
  auto w = Communicator::from_environment();
  EXPECT_EQ(w->backend(), "mpi");
  EXPECT_EQ(w->size(), std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")));
  return w;
}

double value(int rank, int64_t i) { return (rank + 1) * double(i % 7 + 1) * 0.25; }

Tensor filled(DType dtype, int64_t n, int rank, int64_t offset = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = value(rank, offset + i);
  Tensor d = Tensor::from(v, Shape{n});
  if (dtype == DType::f64) return d;
  Tensor t = Tensor::empty(Shape{n}, dtype);
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::f32) t.data<float>()[i] = float(v[size_t(i)]);
    else t.data<bf16>()[i] = float_to_bf16(float(v[size_t(i)]));
  }
  return t;
}

class Collectives : public testing::TestWithParam<DType> {};

TEST_P(Collectives, AllReduceSumsOverRanks) {
  auto comm = world();
  const int64_t n = 1001;
  Tensor t = filled(GetParam(), n, comm->rank());
  comm->all_reduce(t);
  const std::vector<double> got = t.to_vector<double>();
  for (int64_t i = 0; i < n; ++i) {
    double expected = 0;
    for (int r = 0; r < comm->size(); ++r) expected += value(r, i);
    ASSERT_EQ(got[size_t(i)], expected) << "element " << i;
  }
}

TEST_P(Collectives, ReduceScatterGivesRankRTheSumOfChunkR) {
  auto comm = world();
  const int64_t chunk = 37;
  Tensor in = filled(GetParam(), chunk * comm->size(), comm->rank());
  Tensor out = Tensor::zeros(Shape{chunk}, GetParam());
  comm->reduce_scatter(in, out);
  const std::vector<double> got = out.to_vector<double>();
  for (int64_t j = 0; j < chunk; ++j) {
    double expected = 0;
    for (int r = 0; r < comm->size(); ++r) expected += value(r, comm->rank() * chunk + j);
    ASSERT_EQ(got[size_t(j)], expected) << "element " << j;
  }
}

TEST_P(Collectives, AllGatherConcatenatesInRankOrder) {
  auto comm = world();
  const int64_t chunk = 53;
  Tensor in = filled(GetParam(), chunk, comm->rank());
  Tensor out = Tensor::zeros(Shape{comm->size(), chunk}, GetParam());
  comm->all_gather(in, out);
  std::vector<double> got = out.to_vector<double>();
  for (int r = 0; r < comm->size(); ++r) {
    for (int64_t j = 0; j < chunk; ++j) ASSERT_EQ(got[size_t(r * chunk + j)], value(r, j)) << r << "," << j;
  }
  // In place: this rank's chunk of the output is the input (ZeRO's gather of updated shards).
  const Tensor whole = Tensor::zeros(Shape{comm->size() * chunk}, GetParam());
  const Tensor own = whole.slice(comm->rank() * chunk, Shape{chunk});
  own.copy_from(in);
  comm->all_gather(own, whole);
  got = whole.to_vector<double>();
  for (int r = 0; r < comm->size(); ++r) {
    for (int64_t j = 0; j < chunk; ++j) ASSERT_EQ(got[size_t(r * chunk + j)], value(r, j)) << "in place " << r;
  }
}

// The sum over ranks of filled(dtype, n, rank, offset).
std::vector<double> summed(int64_t n, int ranks, int64_t offset = 0) {
  std::vector<double> sum(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int r = 0; r < ranks; ++r) sum[size_t(i)] += value(r, offset + i);
  }
  return sum;
}

TEST_P(Collectives, ReduceSumsOnTheRootAlone) {
  auto comm = world();
  const int root = comm->size() - 1;
  const Tensor in = filled(GetParam(), 77, comm->rank());
  const Tensor untouched = filled(GetParam(), 77, 5);
  Tensor out = untouched.clone();
  comm->reduce(in, out, root);
  EXPECT_EQ(in.to_vector<double>(), filled(GetParam(), 77, comm->rank()).to_vector<double>());
  EXPECT_EQ(out.to_vector<double>(), comm->rank() == root ? summed(77, comm->size()) : untouched.to_vector<double>());
  // Ranks other than the root need no output at all.
  comm->reduce(in, comm->rank() == root ? out : Tensor(), root);
  if (comm->rank() == root) {
    EXPECT_EQ(out.to_vector<double>(), summed(77, comm->size()));
  }
}

TEST_P(Collectives, StartedReductionsCompleteInAnyOrderOfWaiting) {
  // What bucketed gradient reduction does: several collectives in flight on
  // neighbouring slices of one buffer, polled with test(), waited for last first.
  auto comm = world();
  const int64_t n = 3000;
  Tensor t = filled(GetParam(), n, comm->rank());
  Tensor reduced = Tensor::zeros(Shape{1000}, GetParam());
  auto first = comm->start_all_reduce(t.slice(0, Shape{1000}));
  auto second = comm->start_reduce(t.slice(1000, Shape{1000}), reduced, 0);
  auto third = comm->start_all_reduce(t.slice(2000, Shape{1000}));
  first->test();
  third->wait();
  second->wait();
  first->wait();
  EXPECT_TRUE(first->test());
  const std::vector<double> got = t.to_vector<double>(), sum = summed(n, comm->size());
  for (int64_t i = 0; i < n; ++i) {
    // The reduce's input stays as it was; the sum went to rank 0's `reduced`.
    const double expected = i >= 1000 && i < 2000 ? value(comm->rank(), i) : sum[size_t(i)];
    ASSERT_EQ(got[size_t(i)], expected) << "element " << i;
  }
  if (comm->rank() == 0) {
    EXPECT_EQ(reduced.to_vector<double>(), summed(1000, comm->size(), 1000));
  }
}

TEST_P(Collectives, StartedGathersAndReduceScattersCompleteInAnyOrderOfWaiting) {
  // What ZeRO-3 does: a layer's groups gathered at once, the next layer's
  // started while the first is in use, and gradients reduce-scattered meanwhile.
  auto comm = world();
  const int size = comm->size(), rank = comm->rank();
  const int64_t chunk = 37;
  const Tensor a = filled(GetParam(), 100, rank), b = filled(GetParam(), 50, rank, 100);
  const Tensor grads = filled(GetParam(), chunk * size, rank);
  Tensor gathered = Tensor::zeros(Shape{150 * size}, GetParam()), sum = Tensor::zeros(Shape{chunk}, GetParam());
  auto first = comm->start_all_gather(a, gathered.slice(0, Shape{100 * size}));
  auto scatter = comm->start_reduce_scatter(grads, sum);
  auto second = comm->start_all_gather(b, gathered.slice(100 * size, Shape{50 * size}));
  scatter->test();
  second->wait();
  first->wait();
  scatter->wait();
  const std::vector<double> sums = sum.to_vector<double>();
  for (int64_t j = 0; j < chunk; ++j) {
    double expected = 0;
    for (int r = 0; r < size; ++r) expected += value(r, rank * chunk + j);
    ASSERT_EQ(sums[size_t(j)], expected) << "element " << j;
  }
  const std::vector<double> got = gathered.to_vector<double>();
  for (int r = 0; r < size; ++r) {
    for (int64_t i = 0; i < 100; ++i) ASSERT_EQ(got[size_t(r * 100 + i)], value(r, i)) << "rank " << r;
    for (int64_t i = 0; i < 50; ++i) ASSERT_EQ(got[size_t(100 * size + r * 50 + i)], value(r, 100 + i)) << "rank " << r;
  }
}

TEST_P(Collectives, BroadcastCopiesTheRootsTensor) {
  auto comm = world();
  const int root = comm->size() - 1;
  Tensor t = filled(GetParam(), 99, comm->rank());
  comm->broadcast(t, root);
  EXPECT_EQ(t.to_vector<double>(), filled(GetParam(), 99, root).to_vector<double>());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Collectives, testing::Values(DType::f32, DType::f64, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Mpi, SendAndRecvAroundARing) {
  auto comm = world();
  const int n = comm->size(), r = comm->rank();
  Tensor out = filled(DType::f32, 16, r);
  Tensor in = Tensor::zeros(Shape{16}, DType::f32);
  if (r % 2 == 0) {
    comm->send(out, (r + 1) % n);
    comm->recv(in, (r + n - 1) % n);
  } else {
    comm->recv(in, (r + n - 1) % n);
    comm->send(out, (r + 1) % n);
  }
  EXPECT_EQ(in.to_vector<double>(), filled(DType::f32, 16, (r + n - 1) % n).to_vector<double>());
  comm->barrier();
}

TEST(Mpi, SplitFormsGroupsOrderedByKey) {
  auto comm = world();
  const int n = comm->size(), r = comm->rank();
  // One group, ranks reversed by the key.
  auto reversed = comm->split(0, -r);
  EXPECT_EQ(reversed->size(), n);
  EXPECT_EQ(reversed->rank(), n - 1 - r);
  EXPECT_EQ(reversed->world_ranks()[size_t(reversed->rank())], r);
  // One group per rank: an all_reduce inside it sums nothing but its own.
  auto alone = comm->split(r, 0);
  EXPECT_EQ(alone->size(), 1);
  EXPECT_EQ(alone->world_ranks(), std::vector<int>{r});
  Tensor t = filled(DType::f32, 8, r);
  alone->all_reduce(t);
  EXPECT_EQ(t.to_vector<double>(), filled(DType::f32, 8, r).to_vector<double>());
  // A group's collectives reach only its members.
  auto halves = comm->split(r % 2, r);
  Tensor s = Tensor::from(std::vector<float>{float(r)}, Shape{1});
  halves->all_reduce(s);
  float expected = 0;
  for (int q = r % 2; q < n; q += 2) expected += float(q);
  EXPECT_EQ(s.data<float>()[0], expected);
}

TEST(Mpi, DeviceMeshGroups) {
  auto comm = world();
  const int n = comm->size(), r = comm->rank();
  for (int tp : {1, n}) {
    DeviceMesh mesh(*comm, n / tp, tp);
    EXPECT_EQ(mesh.dp_rank(), r / tp);
    EXPECT_EQ(mesh.tp_rank(), r % tp);
    EXPECT_EQ(mesh.dp().size(), n / tp);
    EXPECT_EQ(mesh.tp().size(), tp);
    EXPECT_EQ(mesh.dp().rank(), r / tp);
    EXPECT_EQ(mesh.tp().rank(), r % tp);
    std::vector<int> tp_members, dp_members;
    for (int t = 0; t < tp; ++t) tp_members.push_back(mesh.world_rank(mesh.dp_rank(), t));
    for (int d = 0; d < n / tp; ++d) dp_members.push_back(mesh.world_rank(d, mesh.tp_rank()));
    EXPECT_EQ(mesh.tp().world_ranks(), tp_members);
    EXPECT_EQ(mesh.dp().world_ranks(), dp_members);
  }
}

TEST(Mpi, MismatchedShapesAreErrorsBeforeAnyCommunication) {
  auto comm = world();
  Tensor in = Tensor::zeros(Shape{4}, DType::f32);
  EXPECT_THROW(comm->all_gather(in, Tensor::zeros(Shape{4 * comm->size() + 1}, DType::f32)), Error);
  EXPECT_THROW(comm->reduce_scatter(Tensor::zeros(Shape{3}, DType::f32), in), Error);
  EXPECT_THROW(comm->all_gather(in, Tensor::zeros(Shape{4 * comm->size()}, DType::f64)), Error);
  EXPECT_THROW(comm->all_reduce(Tensor::zeros(Shape{4}, DType::f16)), Error);
  EXPECT_THROW(comm->broadcast(in, comm->size()), Error);
  EXPECT_THROW(comm->reduce(in, Tensor::zeros(Shape{5}, DType::f32), comm->rank()), Error);
  EXPECT_THROW(comm->start_reduce(in, in, -1), Error);
  EXPECT_THROW(comm->send(in, comm->rank()), Error);
  EXPECT_THROW(comm->split(-1, 0), Error);
  comm->barrier();
}

}  // namespace
}  // namespace hone::dist
