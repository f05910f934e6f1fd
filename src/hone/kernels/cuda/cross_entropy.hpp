#pragma once
// Softmax + cross-entropy over the vocabulary on the GPU, one block per row,
// with the semantics of kernels/cpu/cross_entropy.hpp. The forward pass also
// sums the losses and counts (and checks) the targets on the device, so the
// host reads back three numbers instead of the targets.
#include <cstdint>

#include "hone/core/dtype.hpp"

namespace hone::kernels::cuda {

struct LossTotals {
  double sum = 0;       // Σ losses over the unmasked rows (in double, deterministic)
  int64_t tokens = 0;   // unmasked rows with a valid target
  int64_t bad_row = -1; // the first row whose target is outside [0, classes) and not ignore_index
  int32_t bad_target = 0;
};

// Writes losses and lse [rows] (f32); waits for the totals. The `vocab` columns
// are the classes [first, first + vocab) of `classes` (the whole vocabulary
// unless tensor parallelism splits it). Rows lie `ld` >= vocab elements apart
// (padded rows: whole 16-byte groups then, one of the GPU's loads each).
template <typename T>
LossTotals cross_entropy_forward(const T* logits, const int32_t* targets, float* losses, float* lse, int64_t rows,
                                 int64_t vocab, int64_t ld, int32_t ignore_index, int64_t first, int64_t classes);
// In place: logits become scale · row_weights[row] · (softmax - onehot(target))
// (row_weights null: 1); ignored rows 0, and so does the padding of each row.
template <typename T>
void cross_entropy_backward(T* logits, const int32_t* targets, const float* lse, double scale, int64_t rows,
                            int64_t vocab, int64_t ld, int32_t ignore_index, int64_t first,
                            const float* row_weights = nullptr);

// Both, for the whole vocabulary (first 0, classes = vocab), reading each row
// once where it fits in a block's shared memory (GPT-2's 50,257 classes in
// bf16: 100 KB; Llama 3's 128,256 do not fit, and run the two kernels): the
// same results, bit for bit, as cross_entropy_forward then _backward. Where a
// target is bad, its row's gradient is garbage (the caller reports the error).
template <typename T>
LossTotals cross_entropy_forward_backward(T* logits, const int32_t* targets, float* losses, float* lse, double scale,
                                          int64_t rows, int64_t vocab, int64_t ld, int32_t ignore_index);

}  // namespace hone::kernels::cuda
