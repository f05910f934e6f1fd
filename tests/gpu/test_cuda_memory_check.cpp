// The CUDA emulator's memory check (-DHONE_EMULATOR_CHECK=MEMORY, docs/cuda.md):
// AddressSanitizer reports a kernel's access outside its tensors' bytes, also
// where the caching allocator's block has room past them (where a GPU reads
// on without a fault), in a block back in the cache and between an arena's
// tensors. Each bad access runs in a death test: the report names the kernel.
#include <gtest/gtest.h>
#include <sanitizer/asan_interface.h>

#include <vector>

#include "cuda_test.hpp"
#include "hone/core/arena.hpp"
#include "hone/kernels/cuda/common.cuh"

namespace hone::kernels::cuda {
namespace {

__global__ void read_element(const float* values, int64_t index, float* out) { *out = values[index]; }

float read_on_device(const Tensor& values, int64_t index) {
  Tensor out = Tensor::zeros({1}, DType::f32, values.device());
  HONE_LAUNCH(1, 1, 0, read_element)(values.data<float>(), index, out.data<float>());
  HONE_CUDA_LAUNCHED("read_element");
  return out.to(Device::cpu()).data<float>()[0];
}

// 203 floats (812 bytes) in a 1024-byte block of the allocator's.
constexpr int64_t kElements = 203;

Tensor filled() { return Tensor::from(std::vector<float>(kElements, 2.5f), {kElements}).to(test::kGpu); }

void read_past_the_end() { read_on_device(filled(), kElements); }

void read_after_release() {
  const float* stale = filled().data<float>();  // the tensor's block is back in the cache
  const Tensor out = Tensor::zeros({1}, DType::f32, test::kGpu);  // a block of another size class
  HONE_LAUNCH(1, 1, 0, read_element)(stale, 0, out.data<float>());
}

// Two tensors of 256 floats, 1024 bytes each, carved from one arena: with no
// room between them, the first's element 256 would be the second's element 0.
struct Neighbours {
  Arena arena{16384, test::kGpu};
  Tensor first = arena.take({256}, DType::f32);
  Tensor second = arena.take({256}, DType::f32);
};

void read_past_an_arena_tensor() {
  Neighbours n;
  read_on_device(n.first, 256);
}

class CudaMemoryCheck : public test::Cuda {
 protected:
  // Each death test runs in a new process of this binary (no fork of a process
  // with OpenMP's threads).
  void SetUp() override {
    test::Cuda::SetUp();
    GTEST_FLAG_SET(death_test_style, "threadsafe");
  }
};

TEST_F(CudaMemoryCheck, ATensorsOwnBytesAreFine) {
  const Tensor values = filled();
  EXPECT_EQ(read_on_device(values, 0), 2.5f);
  EXPECT_EQ(read_on_device(values, kElements - 1), 2.5f);
}

TEST_F(CudaMemoryCheck, ReportsAReadPastATensorsEndInsideItsBlock) {
  EXPECT_DEATH(read_past_the_end(), "AddressSanitizer: use-after-poison.*read_element");
}

TEST_F(CudaMemoryCheck, ReportsAReadOfATensorBackInTheCache) {
  EXPECT_DEATH(read_after_release(), "AddressSanitizer: use-after-poison.*read_element");
}

TEST_F(CudaMemoryCheck, AnArenasTensorsOwnTheirBytesAlsoWhereTheyShareThem) {
  Neighbours n;
  n.second.copy_from(Tensor::from(std::vector<float>(256, 1.5f), {256}));
  EXPECT_EQ(read_on_device(n.second, 0), 1.5f);
  EXPECT_EQ(read_on_device(n.second, 255), 1.5f);
  // Reused memory: a narrow tensor taken over a wide one's bytes leaves the wide one all of its own.
  const size_t mark = n.arena.mark();
  const Tensor wide = n.arena.take({1000}, DType::f32);
  n.arena.reuse_from(mark);
  const Tensor narrow = n.arena.take({3}, DType::f32);
  wide.copy_from(Tensor::from(std::vector<float>(1000, 0.5f), {1000}));
  EXPECT_EQ(read_on_device(wide, 999), 0.5f);
  EXPECT_EQ(read_on_device(narrow, 2), 0.5f);
}

TEST_F(CudaMemoryCheck, ReportsAReadPastAnArenaTensorsEnd) {
  EXPECT_DEATH(read_past_an_arena_tensor(), "AddressSanitizer: use-after-poison.*read_element");
}

// Work queued on a tensor's bytes (here zeros()'s memset) that is freed before
// the work ran: on a GPU the work runs before the block's next owner uses it,
// and so here, before the block is marked unowned; no report.
TEST_F(CudaMemoryCheck, WorkQueuedOnAFreedTensorRunsBeforeItsBytesAreMarkedUnowned) {
  const float* bytes = nullptr;
  {
    const Tensor freed = Tensor::zeros({kElements}, DType::f32, test::kGpu);
    bytes = freed.data<float>();
  }
  EXPECT_TRUE(__asan_address_is_poisoned(bytes));  // back in the cache
  const Tensor other = Tensor::zeros({1}, DType::f32, test::kGpu);  // a block of another size class
  HONE_CUDA_CHECK(cudaStreamSynchronize(stream()));
  EXPECT_EQ(other.to(Device::cpu()).data<float>()[0], 0.0f);
}

}  // namespace
}  // namespace hone::kernels::cuda
