#pragma once
// Shared by the GPU tests: a fixture that skips where no CUDA device is usable
// (CI machines, which build the CUDA backend but have no GPU), and copies of
// tensors onto the device, attention shapes.
#include <cmath>

#include "hone/kernels/cpu/attention.hpp"
#include "hone/kernels/cuda/runtime.hpp"
#include "support/check.hpp"

namespace hone::test {

inline const Device kGpu = Device::cuda(0);

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kernels::cuda::available()) GTEST_SKIP() << "no usable CUDA device: " << kernels::cuda::unavailable_reason();
  }
};

inline Tensor gpu(const Tensor& t) { return t.defined() ? t.to(kGpu) : Tensor(); }

// A device copy of t starting `skip` elements into a buffer of its own, as a
// tensor sliced from a flat buffer may: aligned to its element size alone.
inline Tensor gpu_at(const Tensor& t, int64_t skip) {
  if (!t.defined()) return Tensor();
  const Tensor placed = Tensor::zeros({skip + t.numel()}, t.dtype(), kGpu).slice(skip, t.shape());
  placed.copy_from(t);
  return placed;
}

// Causal attention of this shape, scaled by 1/sqrt(head_dim).
inline kernels::cpu::AttentionDims attention_dims(int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads,
                                                  int64_t head_dim) {
  return {.batch = batch,
          .seq = seq,
          .n_heads = heads,
          .n_kv_heads = kv_heads,
          .head_dim = head_dim,
          .scale = 1.0 / std::sqrt(double(head_dim))};
}

}  // namespace hone::test
