#include "hone/kernels/cuda/adamw.hpp"

#include <cmath>

#include "hone/kernels/cuda/common.cuh"

namespace hone::kernels::cuda {

namespace {

constexpr int kThreads = 256;

struct AdamWConstants {
  float beta1, beta2, eps, decay, step_size, inv_sqrt_correction2, grad_scale;
};

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n, AdamWConstants c,
                             bf16* compute_copy) {
  HONE_GRID_STRIDE(i, n) {
    const float g = grad[i] * c.grad_scale;  // the clipping coefficient
    const float mi = c.beta1 * m[i] + (1.0f - c.beta1) * g;
    const float vi = c.beta2 * v[i] + (1.0f - c.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float p = param[i] * c.decay - c.step_size * mi / (sqrtf(vi) * c.inv_sqrt_correction2 + c.eps);
    param[i] = p;
    if (compute_copy) compute_copy[i] = from_f32<bf16>(p);
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
  HONE_LAUNCH(blocks_for(n, kThreads), kThreads, 0, adamw_kernel)(param, grad, m, v, n, c, compute_copy);
  HONE_CUDA_LAUNCHED("adamw");
}

}  // namespace hone::kernels::cuda
