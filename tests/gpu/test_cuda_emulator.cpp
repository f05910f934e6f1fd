// The CUDA emulator's own behaviour (docs/cuda.md): what CUDA code sees of
// barriers and shuffles, and the errors it reports where a GPU would hang, read
// garbage or refuse a launch. Built only with -DHONE_CUDA=EMULATOR.
#include <gtest/gtest.h>

#include <vector>

#include "hone/kernels/cuda/common.cuh"
#include "support/check.hpp"

namespace hone::kernels::cuda {
namespace {

using test::error_of;

// Each block sums its threads' indices, and says whether any index was 37.
__global__ void block_sums(float* sums, int* saw_37) {
  __shared__ float scratch[32];
  const float sum = block_sum(float(threadIdx.x), scratch);
  const int any = __syncthreads_or(threadIdx.x == 37);
  if (threadIdx.x == 0) {
    sums[blockIdx.x] = sum;
    saw_37[blockIdx.x] = any;
  }
}

TEST(CudaEmulator, BarriersAndShufflesMeanWhatTheyMeanOnAGpu) {
  for (const int threads : {32, 64, 512}) {
    std::vector<float> sums(3);
    std::vector<int> saw(3);
    HONE_LAUNCH(3, threads, 0, block_sums)(sums.data(), saw.data());
    HONE_CUDA_LAUNCHED("block_sums");
    for (int b = 0; b < 3; ++b) {
      EXPECT_EQ(sums[size_t(b)], float(threads * (threads - 1) / 2)) << threads;
      EXPECT_EQ(saw[size_t(b)], threads > 37 ? 1 : 0) << threads;
    }
  }
}

__device__ void barriers_in_two_branches() {
  if (threadIdx.x < 16) __syncthreads();
  else __syncwarp();
}

__global__ void barrier_in_one_branch() { barriers_in_two_branches(); }

// Only block (1, 2) deadlocks: one that the race check runs on another host thread.
__global__ void barrier_in_one_branch_of_one_block() {
  if (blockIdx.x == 1 && blockIdx.y == 2) barriers_in_two_branches();
}

__global__ void shuffle_after_returns(float* out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = warp_sum(1.0f);
}

__global__ void nothing() {}

__global__ void copy_group(const bf16* from, bf16* to) { store_elements(to, load_elements<8>(from)); }

TEST(CudaEmulator, ReportsWhatAGpuWouldHangOnOrLeaveUndefined) {
  EXPECT_NE(error_of([] { HONE_LAUNCH(1, 64, 0, barrier_in_one_branch)(); }).find("block (0, 0, 0) deadlocks"),
            std::string::npos);
  EXPECT_NE(error_of([] { HONE_LAUNCH(dim3(2, 3), 64, 0, barrier_in_one_branch_of_one_block)(); })
                .find("block (1, 2, 0) deadlocks"),
            std::string::npos);
  std::vector<float> sums(3);
  std::vector<int> saw(3);
  HONE_LAUNCH(3, 64, 0, block_sums)(sums.data(), saw.data());  // and the next launch runs
  EXPECT_EQ(sums, std::vector<float>(3, 64 * 63 / 2));
  std::vector<float> out(32);
  EXPECT_NE(error_of([&] { HONE_LAUNCH(1, 32, 0, shuffle_after_returns)(out.data()); }).find("16 have returned"),
            std::string::npos);
  HONE_LAUNCH(dim3(1, 65536), 32, 0, nothing)();  // grid.y past CUDA's limit
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  HONE_LAUNCH(1, 2048, 0, nothing)();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  HONE_LAUNCH(1, 32, 0, nothing)();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);

  // A 16-byte group one element off its alignment: x86 loads it, a GPU faults.
  alignas(16) bf16 data[24] = {};
  HONE_LAUNCH(1, 1, 0, copy_group)(data, data + 16);
  EXPECT_NE(error_of([&] { HONE_LAUNCH(1, 1, 0, copy_group)(data + 1, data + 16); }).find("not 16-byte aligned"),
            std::string::npos);
  EXPECT_NE(error_of([&] { HONE_LAUNCH(1, 1, 0, copy_group)(data, data + 15); }).find("not 16-byte aligned"),
            std::string::npos);
}

// Writes `count` ints of its dynamic shared memory and copies them out.
__global__ void through_shared(int* out, int count) {
  int* shared = dynamic_shared<int>();
  for (int i = int(threadIdx.x); i < count; i += int(blockDim.x)) shared[i] = i;
  __syncthreads();
  for (int i = int(threadIdx.x); i < count; i += int(blockDim.x)) out[i] = shared[count - 1 - i];
}

// A GPU launches a kernel with more than 48 KiB of dynamic shared memory only
// after cudaFuncSetAttribute raised that kernel's limit; the emulator as well.
TEST(CudaEmulator, DynamicSharedMemoryPast48KiBNeedsTheKernelsOwnLimitRaised) {
  constexpr int kDefault = 48 * 1024, kRaised = 64 * 1024;
  std::vector<int> out(kRaised / sizeof(int));
  const int count = int(out.size());
  cudaFuncAttributes attributes{};
  ASSERT_EQ(cudaFuncGetAttributes(&attributes, through_shared), cudaSuccess);
  EXPECT_EQ(attributes.maxDynamicSharedSizeBytes, kDefault);
  HONE_LAUNCH(1, 256, kDefault, through_shared)(out.data(), int(kDefault / sizeof(int)));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(out[0], int(kDefault / sizeof(int)) - 1);
  HONE_LAUNCH(1, 256, kRaised, through_shared)(out.data(), count);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(out[0], int(kDefault / sizeof(int)) - 1);  // it did not run

  ASSERT_EQ(cudaFuncSetAttribute(through_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, kRaised), cudaSuccess);
  ASSERT_EQ(cudaFuncGetAttributes(&attributes, through_shared), cudaSuccess);
  EXPECT_EQ(attributes.maxDynamicSharedSizeBytes, kRaised);
  HONE_LAUNCH(1, 256, kRaised, through_shared)(out.data(), count);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(out[0], count - 1);
  EXPECT_EQ(out[size_t(count) - 1], 0);
  HONE_LAUNCH(1, 256, kRaised + 4, through_shared)(out.data(), count);  // past the raised limit
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  HONE_LAUNCH(1, 32, kRaised, nothing)();  // another kernel's limit is its own
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFuncSetAttribute(through_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024),
            cudaErrorInvalidValue);  // past the device's (an H100's 227 KiB)
  ASSERT_EQ(cudaFuncSetAttribute(through_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, kDefault), cudaSuccess);
}

}  // namespace
}  // namespace hone::kernels::cuda
