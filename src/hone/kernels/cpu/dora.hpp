#pragma once
// DoRA (Liu et al. 2024, weight-decomposed LoRA): an adapted weight block's
// rows are rescaled to learned magnitudes, y = (m / ‖W + s·B·A‖) ⊙ (x·Wᵀ +
// s·x·Aᵀ·Bᵀ), the norm per output row and held constant in backward (the
// paper's section 4.3, as PEFT and torchtune do).
#include <cstdint>

#include "hone/core/dtype.hpp"

namespace hone::kernels::cpu {

// For a weight block w [rows, in] (T: float, bf16 or double) with its adapter
// A [rank, in] and B [rows, rank] and magnitudes m [rows] (in compute_t<T>):
// the norm n_i = ‖w_i + s·(B·A)_i‖ (summed in double, held in compute_t<T>,
// written to `norms` unless null), inv_norm[i] = 1 / n_i and scale[i] = m[i] /
// n_i, without forming W + s·B·A. Magnitudes set to these norms give scales
// of exactly 1 (DoRA's start: the model is its base).
template <typename T>
void dora_norms(const T* weight, int64_t rows, int64_t in, const compute_t<T>* a, const compute_t<T>* b,
                int64_t rank, double s, const compute_t<T>* magnitude, compute_t<T>* scale, compute_t<T>* inv_norm,
                compute_t<T>* norms);
// x[i, :] *= factor[i] for x [rows, cols].
template <typename M>
void scale_rows(M* x, int64_t rows, int64_t cols, const M* factor);
// The block y[:, col:col+cols] of a [rows, width] output (bias: its part of
// the layer's bias, or null): z = y_block − bias, y_block = scale ⊙ z + bias.
template <typename T>
void dora_scale_forward(T* y, int64_t width, int64_t col, int64_t rows, int64_t cols, const compute_t<T>* scale,
                        const compute_t<T>* bias, T* z);
// d_magnitude[j] += Σ_rows dy[r, col + j]·z[r, j]·inv_norm[j] (deterministic
// for any thread count), then dy's block *= scale (the gradient of z).
template <typename T>
void dora_scale_backward(T* dy, int64_t width, int64_t col, int64_t rows, int64_t cols, const T* z,
                         const compute_t<T>* scale, const compute_t<T>* inv_norm, compute_t<T>* d_magnitude);

}  // namespace hone::kernels::cpu
