// The CUDA emulator's own behaviour (docs/cuda.md): what CUDA code sees of
// barriers, shuffles and streams, and the errors it reports where a GPU would
// hang, read garbage or refuse a launch. Built only with -DHONE_CUDA=EMULATOR.
#include <gtest/gtest.h>

#include <cmath>
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

// One thread a float.
__global__ void copy_floats(const float* from, float* to) { to[threadIdx.x] = from[threadIdx.x]; }
__global__ void fill_floats(float* to, float value) { to[threadIdx.x] = value; }

// A stream (not hone's) and an event on it, for copies beside hone's stream.
struct SecondStream {
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
  SecondStream() {
    HONE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    HONE_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  }
  ~SecondStream() {
    cudaEventDestroy(event);
    cudaStreamDestroy(stream);
  }
  void copy(std::vector<float>& to, const std::vector<float>& from) {
    HONE_CUDA_CHECK(cudaMemcpyAsync(to.data(), from.data(), to.size() * sizeof(float), cudaMemcpyDefault, stream));
  }
  void record() { HONE_CUDA_CHECK(cudaEventRecord(event, stream)); }
};

// A copy runs as late as CUDA lets it: when something waits for it. Until
// then its destination holds NaN, which a kernel that does not wait reads.
TEST(CudaEmulator, CopiesRunWhenSomethingWaitsForThem) {
  SecondStream copies;
  const std::vector<float> twos(32, 2.0f);
  std::vector<float> device(32, 0.0f), back(32, 0.0f);
  copies.copy(device, twos);
  copies.record();
  EXPECT_TRUE(std::isnan(device[0]));
  HONE_LAUNCH(1, 32, 0, copy_floats)(device.data(), back.data());  // no wait: the copy has not run
  EXPECT_TRUE(std::isnan(back[31]));
  HONE_CUDA_CHECK(cudaStreamWaitEvent(stream(), copies.event, 0));
  EXPECT_EQ(device, twos);
  HONE_LAUNCH(1, 32, 0, copy_floats)(device.data(), back.data());
  EXPECT_EQ(back, twos);

  // In order on their stream; a wait for an event runs the work before it, not after it.
  std::vector<float> first(32, 0.0f), second(32, 0.0f);
  copies.copy(first, twos);
  copies.record();
  copies.copy(second, first);  // starts after the copy before it, which writes its source
  HONE_CUDA_CHECK(cudaStreamWaitEvent(stream(), copies.event, 0));
  EXPECT_EQ(first, twos);
  EXPECT_TRUE(std::isnan(second[0]));
  HONE_CUDA_CHECK(cudaStreamSynchronize(copies.stream));
  EXPECT_EQ(second, twos);

  // A memset queued on hone's stream runs before the next launch there.
  HONE_CUDA_CHECK(cudaMemsetAsync(device.data(), 0, device.size() * sizeof(float), stream()));
  HONE_LAUNCH(1, 32, 0, copy_floats)(device.data(), back.data());
  EXPECT_EQ(back, std::vector<float>(32, 0.0f));
}

// Writing over a copy's source before anything waited for the copy is an
// error, named where it is first seen.
TEST(CudaEmulator, ReportsAWriteOverTheSourceOfACopyNothingWaitedFor) {
  SecondStream copies;
  std::vector<float> device(32, 3.0f), host(32, 0.0f);
  copies.copy(host, device);
  const std::string error = error_of([&] { HONE_LAUNCH(1, 32, 0, fill_floats)(device.data(), 4.0f); });
  // 3.0f and 4.0f first differ in their third byte (0x40400000, 0x40800000, little-endian).
  EXPECT_NE(error.find("byte 2 of the source of a copy of 128 bytes"), std::string::npos) << error;
  EXPECT_NE(error.find("found after kernel fill_floats"), std::string::npos) << error;
  HONE_CUDA_CHECK(cudaStreamSynchronize(copies.stream));

  // Ordered by an event, the copy reads the value before the kernel's.
  copies.copy(host, device);
  copies.record();
  HONE_CUDA_CHECK(cudaStreamWaitEvent(stream(), copies.event, 0));
  HONE_LAUNCH(1, 32, 0, fill_floats)(device.data(), 5.0f);
  HONE_CUDA_CHECK(cudaStreamSynchronize(copies.stream));
  EXPECT_EQ(host, std::vector<float>(32, 4.0f));
  EXPECT_EQ(device, std::vector<float>(32, 5.0f));

  // The host writing over it, seen when the copy runs.
  copies.copy(host, device);
  device[7] = 6.0f;
  const std::string by_host = error_of([&] { HONE_CUDA_CHECK(cudaStreamSynchronize(copies.stream)); });
  EXPECT_NE(by_host.find("byte 30 of the source"), std::string::npos) << by_host;  // float 7's third byte
  EXPECT_NE(by_host.find("found as it ran"), std::string::npos) << by_host;

  // A copy queued on another stream, whose destination it may write at once.
  std::vector<float> elsewhere(32, 0.0f);
  copies.copy(host, device);
  const std::string by_copy = error_of([&] {
    HONE_CUDA_CHECK(cudaMemcpyAsync(device.data(), elsewhere.data(), 128, cudaMemcpyDefault, stream()));
  });
  EXPECT_NE(by_copy.find("found after a copy queued on"), std::string::npos) << by_copy;
  HONE_CUDA_CHECK(cudaStreamSynchronize(stream()));
  HONE_CUDA_CHECK(cudaStreamSynchronize(copies.stream));
}

}  // namespace
}  // namespace hone::kernels::cuda
