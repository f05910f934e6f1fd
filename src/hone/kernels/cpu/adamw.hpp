#pragma once
// Fused AdamW update with decoupled weight decay (Loshchilov & Hutter), the
// arithmetic of torch.optim.AdamW, over one contiguous span of parameters.
#include <cstdint>

#include "hone/core/dtype.hpp"

namespace hone::kernels::cpu {

struct AdamWHyper {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;          // 1-based step count, for bias correction
  double grad_scale = 1.0;   // multiplies every gradient first (the clipping coefficient)
};

// Updates param, m and v in place from grad. When compute_copy is not null it
// receives the updated parameters in bf16 (the weights the next step's GEMMs read),
// in the same pass.
template <typename M>
void adamw_update(M* param, const M* grad, M* m, M* v, int64_t n, const AdamWHyper& hyper, bf16* compute_copy);

}  // namespace hone::kernels::cpu
