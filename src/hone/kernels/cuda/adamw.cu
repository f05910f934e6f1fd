#include "hone/kernels/cuda/adamw.hpp"

#include <cmath>

#include "hone/kernels/cuda/common.cuh"

namespace hone::kernels::cuda {

namespace {

constexpr int kThreads = 256;

struct AdamWConstants {
  float beta1, beta2, eps, decay, step_size, inv_sqrt_correction2, grad_scale;
};

// Each thread updates kWidth consecutive elements at a time: with kWidth 4,
// one 16-byte access to each f32 buffer and 8 bytes to the bf16 copy.
template <int kWidth>
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n, AdamWConstants c,
                             bf16* compute_copy) {
  HONE_GRID_STRIDE(i, n / kWidth) {
    const int64_t at = i * kWidth;
    auto pi = load_elements<kWidth>(param + at), mi = load_elements<kWidth>(m + at), vi = load_elements<kWidth>(v + at);
    const auto gi = load_elements<kWidth>(grad + at);
    Elements<bf16, kWidth> copy;
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      const float g = gi.v[k] * c.grad_scale;  // the clipping coefficient
      mi.v[k] = c.beta1 * mi.v[k] + (1.0f - c.beta1) * g;
      vi.v[k] = c.beta2 * vi.v[k] + (1.0f - c.beta2) * g * g;
      pi.v[k] = pi.v[k] * c.decay - c.step_size * mi.v[k] / (sqrtf(vi.v[k]) * c.inv_sqrt_correction2 + c.eps);
      copy.v[k] = from_f32<bf16>(pi.v[k]);
    }
    store_elements(m + at, mi);
    store_elements(v + at, vi);
    store_elements(param + at, pi);
    if (compute_copy) store_elements(compute_copy + at, copy);
  }
}

}  // namespace

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWHyper& h,
                  bf16* compute_copy) {
  if (n == 0) return;
  // Bias corrections in double on the host, as the CPU kernel computes them.
  const double correction1 = 1.0 - std::pow(h.beta1, double(h.step));
  const double correction2 = 1.0 - std::pow(h.beta2, double(h.step));
  const AdamWConstants c{float(h.beta1),
                         float(h.beta2),
                         float(h.eps),
                         float(1.0 - h.lr * h.weight_decay),
                         float(h.lr / correction1),
                         float(1.0 / std::sqrt(correction2)),
                         float(h.grad_scale)};
  // Groups of 4 where the f32 buffers are 16-byte aligned and the copy 8-byte
  // aligned (its elements are half as wide); the last n % 4 elements, or all of
  // them otherwise, one by one.
  constexpr int kGroup = kWideGroup<float>;
  const bool grouped = aligned_to(param, 16) && aligned_to(grad, 16) && aligned_to(m, 16) && aligned_to(v, 16) &&
                       aligned_to(compute_copy, 8);
  const int64_t head = grouped ? n / kGroup * kGroup : 0;
  if (head > 0) {
    HONE_LAUNCH(blocks_for(head / kGroup, kThreads), kThreads, 0, adamw_kernel<kGroup>)(
        param, grad, m, v, head, c, compute_copy);
  }
  if (n > head) {
    HONE_LAUNCH(blocks_for(n - head, kThreads), kThreads, 0, adamw_kernel<1>)(
        param + head, grad + head, m + head, v + head, n - head, c, compute_copy ? compute_copy + head : nullptr);
  }
  HONE_CUDA_LAUNCHED("adamw");
}

}  // namespace hone::kernels::cuda
