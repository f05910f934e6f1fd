#include "hone/kernels/cpu/adamw.hpp"

#include <cmath>

namespace hone::kernels::cpu {

template <typename M>
void adamw_update(M* param, const M* grad, M* m, M* v, int64_t n, const AdamWHyper& h, bf16* compute_copy) {
  const M beta1 = M(h.beta1), beta2 = M(h.beta2), eps = M(h.eps);
  const M decay = M(1.0 - h.lr * h.weight_decay);
  const double correction1 = 1.0 - std::pow(h.beta1, double(h.step));
  const double correction2 = 1.0 - std::pow(h.beta2, double(h.step));
  const M step_size = M(h.lr / correction1);
  const M inv_sqrt_correction2 = M(1.0 / std::sqrt(correction2));
  const M grad_scale = M(h.grad_scale);
  // One loop with the bf16 copy, one without: a branch inside would keep the
  // loop from vectorizing (it is memory-bound: 30 bytes a parameter with the copy).
  auto update = [&]<bool kWithCopy>() {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const M g = grad[i] * grad_scale;
      const M mi = beta1 * m[i] + (M(1) - beta1) * g;
      const M vi = beta2 * v[i] + (M(1) - beta2) * g * g;
      m[i] = mi;
      v[i] = vi;
      const M p = param[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_correction2 + eps);
      param[i] = p;
      if constexpr (kWithCopy) compute_copy[i] = float_to_bf16(float(p));
    }
  };
  if (compute_copy) update.template operator()<true>();
  else update.template operator()<false>();
}

template void adamw_update<float>(float*, const float*, float*, float*, int64_t, const AdamWHyper&, bf16*);
template void adamw_update<double>(double*, const double*, double*, double*, int64_t, const AdamWHyper&, bf16*);

}  // namespace hone::kernels::cpu
