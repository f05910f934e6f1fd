#pragma once
// DoRA's kernels with the semantics of kernels/cpu/dora.hpp. T is float or
// bf16; magnitudes, norms and scales are float; all pointers are device memory.
#include <cstdint>

#include "hone/core/dtype.hpp"

namespace hone::kernels::cuda {

template <typename T>
void dora_norms(const T* weight, int64_t rows, int64_t in, const float* a, const float* b, int64_t rank, double s,
                const float* magnitude, float* scale, float* inv_norm, float* norms);
void scale_rows(float* x, int64_t rows, int64_t cols, const float* factor);
template <typename T>
void dora_scale_forward(T* y, int64_t width, int64_t col, int64_t rows, int64_t cols, const float* scale,
                        const float* bias, T* z);
// d_magnitude += Σ_rows dy·z·inv_norm (deterministic), then dy's block *= scale.
template <typename T>
void dora_scale_backward(T* dy, int64_t width, int64_t col, int64_t rows, int64_t cols, const T* z,
                         const float* scale, const float* inv_norm, float* d_magnitude);

}  // namespace hone::kernels::cuda
