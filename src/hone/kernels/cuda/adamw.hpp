#pragma once
// Fused AdamW on the GPU with the arithmetic of kernels/cpu/adamw.hpp: one pass
// over a contiguous span of fp32 master weights, their gradients and moments
// (a parameter group's flat buffers: one launch updates every tensor of the
// group), gradients scaled by hyper.grad_scale (clipping) as they are read,
// writing the bf16 compute copy in the same pass when given.
#include <cstdint>

#include "hone/kernels/cpu/adamw.hpp"

namespace hone::kernels::cuda {

using cpu::AdamWHyper;

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWHyper& hyper,
                  bf16* compute_copy);

}  // namespace hone::kernels::cuda
