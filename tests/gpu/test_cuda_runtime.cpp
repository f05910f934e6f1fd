// The CUDA runtime where no GPU is usable (CI builds the backend on machines
// without one): asking for a CUDA tensor fails with an error that says why,
// rather than crashing, and nothing touches the driver before that.
#include <dlfcn.h>

#include "cuda_test.hpp"
#include "hone/core/profiler.hpp"
#include "hone/kernels/cuda/attention_cudnn.hpp"
#include "hone/kernels/cuda/runtime.hpp"
#include "hone/model/config.hpp"
#include "hone/ops/ops.hpp"
#include "hone/train/run_config.hpp"

namespace hone::test {
namespace {

TEST(CudaRuntime, ADeviceTensorWithoutAUsableGpuIsAClearError) {
  if (kernels::cuda::available()) GTEST_SKIP() << "a CUDA device is usable here: tests/gpu covers it";
  EXPECT_FALSE(kernels::cuda::unavailable_reason().empty());
  const std::string error = error_of([] { Tensor::zeros({4}, DType::f32, kGpu); });
  EXPECT_NE(error.find("device cuda:0 requested, but no CUDA device is usable"), std::string::npos) << error;
  EXPECT_NE(error.find(kernels::cuda::unavailable_reason()), std::string::npos) << error;
  // Nothing was started: waiting and releasing memory do nothing, and
  // HONE_PROFILE times ops on the host.
  ops::synchronize(kGpu);
  EXPECT_EQ(kernels::cuda::profile_clock().mark(), nullptr);
  kernels::cuda::empty_cache();
  EXPECT_EQ(allocator_for(kGpu).stats().reserved, 0u);
}

TEST(CudaRuntime, ChoosingTheDeviceChecksItsIndex) {
  EXPECT_NE(error_of([] { kernels::cuda::set_device(-1); }), "");
  EXPECT_EQ(error_of([] { kernels::cuda::set_device(kernels::cuda::current_device()); }), "");
}

// A process run on cuda:N computes there: ops::use_device, which the recipes'
// TrainingWorld, hone bench and generation call before making anything, picks it.
TEST(CudaRuntime, UseDeviceChoosesTheProcessGpu) {
  if (kernels::cuda::available()) GTEST_SKIP() << "a CUDA device is usable here: it would start on the first tensor";
  const int before = kernels::cuda::current_device();
  ops::use_device(Device::cuda(2));
  EXPECT_EQ(kernels::cuda::current_device(), 2);
  const std::string error = error_of([] { Tensor::zeros({4}, DType::f32, Device::cuda(2)); });
  EXPECT_NE(error.find("device cuda:2 requested"), std::string::npos) << error;
  ops::use_device(Device::cpu());  // nothing to choose
  EXPECT_EQ(kernels::cuda::current_device(), 2);
  ops::use_device(Device::cuda(before));
}

// cuDNN takes hone's fused attention graphs (attention_cudnn.cpp) for an H100
// without one: cuDNN 9.8+ plans for a GPU it is given the properties of (an
// H100 SXM's, as cudaGetDeviceProperties reports them). Without a GPU driver,
// the toolkit's stub stands in for it: cuDNN recognizes each graph as fused
// attention, picks an engine and compiles its kernels, and only loading them
// fails. The shapes of #8's benchmarks and models, MQA, ALiBi (MPT), and
// packed samples (fine-tuning with dataset.packed).
TEST(CudaRuntime, CudnnPlansTheAttentionGraphsForAnH100) {
  if (!kernels::cuda::cudnn_attention_built()) GTEST_SKIP() << "hone was built without cuDNN's headers";
  const bool stub = !kernels::cuda::available();
  if (stub && dlopen(HONE_CUDA_DRIVER_STUB, RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    GTEST_SKIP() << "no CUDA driver library here, not even the toolkit's stub: " << dlerror();
  }
  const std::string h100 = R"({"deviceName": "NVIDIA H100 80GB HBM3", "cudaDeviceId": 0, "deviceVer": 900,
    "driverVer": 13000, "multiProcessorCount": 132, "totalGlobalMem": 85520809984, "l2CacheSize": 52428800,
    "maxSharedMemoryPerBlock": 49152, "maxSharedMemoryPerBlockOptin": 232448, "reservedSharedMemoryPerBlock": 1024,
    "maxGridSize": [2147483647, 65535, 65535], "maxBlockSize": [1024, 1024, 64], "regsPerBlock": 65536,
    "maxRegistersPerSM": 65536, "maxThreadsPerBlock": 1024, "maxThreadsPerSM": 2048, "maxCtasPerSM": 32,
    "warpSize": 32, "smClockRateKHz": 1980000, "memClockRateKHz": 2619000, "pciDeviceId": 0, "isTccDriver": 0,
    "supportCoopLaunch": 1})";
  struct Shape {
    int64_t batch, seq, heads, kv_heads, head_dim;
    bool alibi, packed;
  };
  const int32_t never_read = 0;  // planning reads no data: a packed graph needs a positions pointer only
  for (const Shape s : {Shape{4, 2048, 32, 8, 64, false, false},     // Llama 3.2 1B
                        Shape{2, 2048, 32, 8, 128, false, false},    // Llama 3.1 8B
                        Shape{8, 1024, 12, 12, 64, false, false},    // GPT-2 124M
                        Shape{4, 4096, 16, 16, 128, false, false},   // attention alone
                        Shape{1, 384, 4, 1, 128, false, false},      // MQA
                        Shape{8, 2048, 12, 12, 64, true, false},     // MPT 125M
                        Shape{2, 2048, 32, 32, 128, true, false},    // MPT 7B
                        Shape{2, 2048, 32, 8, 128, false, true},     // Llama 3.1 8B fine-tuning on packed samples
                        Shape{1, 256, 4, 2, 64, true, true}}) {      // ALiBi, grouped heads, packed samples
    auto dims = attention_dims(s.batch, s.seq, s.heads, s.kv_heads, s.head_dim);
    if (s.packed) dims.positions = &never_read;
    const std::string error = kernels::cuda::plan_cudnn_attention(h100, dims, s.alibi);
    if (error.find("cannot load") == 0) GTEST_SKIP() << "no cuDNN library here: " << error;
    SCOPED_TRACE(fmt::format("batch {} seq {} heads {}/{} head_dim {}{}{}", s.batch, s.seq, s.heads, s.kv_heads,
                             s.head_dim, s.alibi ? " ALiBi" : "", s.packed ? " packed" : ""));
    if (!stub) {
      EXPECT_EQ(error, "");
      continue;
    }
    // Both passes got as far as loading their compiled kernels, and no further.
    const std::string loading = "CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER: cuLibraryLoadData";
    const size_t forward = error.find("forward pass: cuDNN execution plan: " + loading);
    const size_t backward = error.find("backward pass: cuDNN execution plan: " + loading);
    EXPECT_TRUE(forward != std::string::npos && backward != std::string::npos) << error;
  }
}

// The memory estimate counts what cuDNN's attention backward pass allocates
// where cuDNN takes the call: llama_125M (and mpt_125M, ALiBi) in bf16 on CUDA
// at a length that is a multiple of 128, not at another length, in f32, or with
// hone's kernels chosen.
TEST(CudaRuntime, TheMemoryEstimateCountsCudnnAttentionScratch) {
  if (!kernels::cuda::cudnn_attention_built()) GTEST_SKIP() << "hone was built without cuDNN's headers";
  const auto workspace = [&](DType dtype, int64_t seq, const char* preset = "llama_125M") {
    return estimate_training_memory(model_preset(preset), dtype, 2, seq, {}, std::nullopt, 0, 1, kGpu).workspace;
  };
  const size_t gemm = ops::gemm_workspace_bytes(kGpu);
  const size_t dq_sums = 2 * 12 * 256 * 64 * 4, row_sums = 2 * 12 * 256 * 4;  // both multiples of 256 bytes
  EXPECT_EQ(workspace(DType::bf16, 256), gemm + dq_sums + row_sums);
  EXPECT_EQ(workspace(DType::bf16, 256, "mpt_125M"), gemm + dq_sums + row_sums);  // 12 heads of 64 too
  EXPECT_EQ(workspace(DType::bf16, 200), gemm);
  EXPECT_EQ(workspace(DType::f32, 256), gemm);
  const auto before = kernels::cuda::attention_kernels();
  kernels::cuda::set_attention_kernels(kernels::cuda::AttentionKernels::hone);
  EXPECT_EQ(workspace(DType::bf16, 256), gemm);
  kernels::cuda::set_attention_kernels(before);
}

}  // namespace
}  // namespace hone::test
