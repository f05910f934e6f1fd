// The NCCL backend on CUDA tensors (built with HONE_WITH_NCCL; skipped without a
// GPU). Alone it checks a world of one; under `hone launch --nproc-per-node 2`
// on a machine with two GPUs it checks every collective across both.
#include <gtest/gtest.h>

#include <cstdlib>

#include "hone/core/error.hpp"
#include "hone/dist/environment.hpp"
#include "hone/dist/nccl_communicator.hpp"
#include "hone/kernels/cuda/runtime.hpp"

namespace hone::dist {
namespace {

std::unique_ptr<NcclCommunicator> world() {
  ProcessInfo p = discover_process();
  if (p.world_size == 1) {  // a world of one still goes through NCCL: rank 0 serves no one at the rendezvous
    p.master_addr = "127.0.0.1";
    p.master_port = 20000 + int(::getpid() % 20000);
  }
  int devices = 0;
  cudaGetDeviceCount(&devices);
  if (!kernels::cuda::available() || devices < p.local_world_size) return nullptr;
  kernels::cuda::set_device(p.local_world_size > 1 ? p.local_rank : 0);
  return NcclCommunicator::world(p, Device::cuda(kernels::cuda::current_device()));
}

Tensor on_gpu(const std::vector<float>& v) {
  return Tensor::from(v, Shape{int64_t(v.size())}).to(Device::cuda(kernels::cuda::current_device()));
}

TEST(Nccl, CollectivesMatchTheirDefinitions) {
  auto comm = world();
  if (!comm) GTEST_SKIP() << "needs one GPU per local rank";
  const int n = comm->size(), r = comm->rank();
  EXPECT_EQ(comm->backend(), "nccl");
  auto values = [](int rank, int count, int offset = 0) {
    std::vector<float> v;
    for (int i = 0; i < count; ++i) v.push_back(float((rank + 1) * ((offset + i) % 7 + 1)) * 0.25f);
    return v;
  };
  Tensor t = on_gpu(values(r, 100));
  comm->all_reduce(t);
  std::vector<float> sum(100, 0.0f);
  for (int q = 0; q < n; ++q) {
    const auto v = values(q, 100);
    for (int i = 0; i < 100; ++i) sum[size_t(i)] += v[size_t(i)];
  }
  EXPECT_EQ(t.to_vector<float>(), sum);

  Tensor gathered = Tensor::zeros(Shape{10 * n}, DType::f32, t.device());
  comm->all_gather(on_gpu(values(r, 10)), gathered);
  std::vector<float> expected;
  for (int q = 0; q < n; ++q) {
    const auto v = values(q, 10);
    expected.insert(expected.end(), v.begin(), v.end());
  }
  EXPECT_EQ(gathered.to_vector<float>(), expected);

  Tensor chunk = Tensor::zeros(Shape{10}, DType::f32, t.device());
  comm->reduce_scatter(on_gpu(values(r, 10 * n)), chunk);
  std::vector<float> mine(10, 0.0f);
  for (int q = 0; q < n; ++q) {
    const auto v = values(q, 10 * n);
    for (int i = 0; i < 10; ++i) mine[size_t(i)] += v[size_t(r * 10 + i)];
  }
  EXPECT_EQ(chunk.to_vector<float>(), mine);

  // Started collectives: waited for in reverse order; the reduce's input stays.
  Tensor whole = on_gpu(values(r, 30));
  Tensor reduced = Tensor::zeros(Shape{10}, DType::f32, t.device());
  auto first = comm->start_all_reduce(whole.slice(0, Shape{20}));
  auto second = comm->start_reduce(whole.slice(20, Shape{10}), reduced, 0);
  second->wait();
  first->wait();
  EXPECT_TRUE(first->test());
  std::vector<float> expected_whole = values(r, 30), expected_reduced(10, 0.0f);
  for (int i = 0; i < 20; ++i) expected_whole[size_t(i)] = 0.0f;
  for (int q = 0; q < n; ++q) {
    const auto v = values(q, 30);
    for (int i = 0; i < 20; ++i) expected_whole[size_t(i)] += v[size_t(i)];
    for (int i = 0; i < 10; ++i) expected_reduced[size_t(i)] += v[size_t(20 + i)];
  }
  EXPECT_EQ(whole.to_vector<float>(), expected_whole);
  if (r == 0) {
    EXPECT_EQ(reduced.to_vector<float>(), expected_reduced);
  }

  // ZeRO-3's pattern: a gather started, a reduce_scatter started behind it, waited for in reverse.
  Tensor layer = Tensor::zeros(Shape{6 * n}, DType::f32, t.device());
  Tensor scattered = Tensor::zeros(Shape{10}, DType::f32, t.device());
  auto gather = comm->start_all_gather(on_gpu(values(r, 6)), layer);
  auto scatter = comm->start_reduce_scatter(on_gpu(values(r, 10 * n)), scattered);
  scatter->wait();
  gather->wait();
  std::vector<float> expected_gathered;
  for (int q = 0; q < n; ++q) {
    const auto v = values(q, 6);
    expected_gathered.insert(expected_gathered.end(), v.begin(), v.end());
  }
  EXPECT_EQ(layer.to_vector<float>(), expected_gathered);
  EXPECT_EQ(scattered.to_vector<float>(), mine);

  Tensor b = on_gpu(values(r, 5));
  comm->broadcast(b, n - 1);
  EXPECT_EQ(b.to_vector<float>(), values(n - 1, 5));
  comm->barrier();

  auto reversed = comm->split(0, -r);
  EXPECT_EQ(reversed->rank(), n - 1 - r);
  EXPECT_EQ(reversed->world_ranks()[size_t(reversed->rank())], comm->world_ranks()[size_t(r)]);
  if (n > 1) {
    Tensor out = on_gpu(values(r, 8));
    Tensor in = Tensor::zeros(Shape{8}, DType::f32, t.device());
    if (r == 0) {
      comm->send(out, 1);
    } else if (r == 1) {
      comm->recv(in, 0);
      EXPECT_EQ(in.to_vector<float>(), values(0, 8));
    }
  }
  EXPECT_THROW(comm->all_reduce(Tensor::zeros(Shape{4}, DType::f32)), Error);  // a CPU tensor
}

}  // namespace
}  // namespace hone::dist
