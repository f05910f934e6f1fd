// The CUDA runtime where no GPU is usable (CI builds the backend on machines
// without one): asking for a CUDA tensor fails with an error that says why,
// rather than crashing, and nothing touches the driver before that.
#include "cuda_test.hpp"
#include "hone/ops/ops.hpp"

namespace hone::test {
namespace {

TEST(CudaRuntime, ADeviceTensorWithoutAUsableGpuIsAClearError) {
  if (kernels::cuda::available()) GTEST_SKIP() << "a CUDA device is usable here: tests/gpu covers it";
  EXPECT_FALSE(kernels::cuda::unavailable_reason().empty());
  const std::string error = error_of([] { Tensor::zeros({4}, DType::f32, kGpu); });
  EXPECT_NE(error.find("device cuda:0 requested, but no CUDA device is usable"), std::string::npos) << error;
  EXPECT_NE(error.find(kernels::cuda::unavailable_reason()), std::string::npos) << error;
  // Nothing was started: waiting and releasing memory do nothing.
  ops::synchronize(kGpu);
  kernels::cuda::empty_cache();
  EXPECT_EQ(allocator_for(kGpu).stats().reserved, 0u);
}

TEST(CudaRuntime, ChoosingTheDeviceChecksItsIndex) {
  EXPECT_NE(error_of([] { kernels::cuda::set_device(-1); }), "");
  EXPECT_EQ(error_of([] { kernels::cuda::set_device(kernels::cuda::current_device()); }), "");
}

}  // namespace
}  // namespace hone::test
