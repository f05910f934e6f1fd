#pragma once
// Softmax + cross-entropy over the vocabulary in one pass per row, with an
// ignore index for masked targets (prompt tokens, padding).
#include <cstdint>

#include "hone/core/dtype.hpp"

namespace hone::kernels::cpu {

// losses[row] = logsumexp(logits[row]) - logits[row, target], computed in
// compute_t<T>; lse[row] keeps the logsumexp for the backward pass. Rows whose
// target is ignore_index get loss 0. The `vocab` columns are the classes
// [first, first + vocab) (a tensor-parallel part of the vocabulary): a target
// outside them counts as a logit of 0 (the part that holds it has the logit).
// Rows lie `ld` >= vocab elements apart; the padding past `vocab` is not read.
template <typename T>
void cross_entropy_forward(const T* logits, const int32_t* targets, compute_t<T>* losses, compute_t<T>* lse,
                           int64_t rows, int64_t vocab, int64_t ld, int32_t ignore_index, int64_t first = 0);

// In place: logits become scale · (softmax(logits) - onehot(target)), the
// gradient of scale · Σ losses; ignored rows become 0. The logits buffer is the
// largest activation, so reusing it saves a vocabulary-sized copy. With a part
// of the vocabulary, lse is the whole vocabulary's logsumexp. With
// row_weights (null: all 1), row r's gradient is scaled by row_weights[r]: the
// gradient of scale · Σ row_weights[r] · losses[r]. Each row's padding becomes 0.
template <typename T>
void cross_entropy_backward(T* logits, const int32_t* targets, const compute_t<T>* lse, double scale, int64_t rows,
                            int64_t vocab, int64_t ld, int32_t ignore_index, int64_t first = 0,
                            const compute_t<T>* row_weights = nullptr);

// Both passes row by row over the whole vocabulary: the forward's losses and
// lse, then the backward's gradient while the row is still in cache: the
// largest activation is read from memory once instead of twice, and each
// logit's exp is taken once (kept in a per-thread row of compute_t<T>).
// Equal to the two passes up to rounding, not bit for bit.
template <typename T>
void cross_entropy_forward_backward(T* logits, const int32_t* targets, compute_t<T>* losses, compute_t<T>* lse,
                                    double scale, int64_t rows, int64_t vocab, int64_t ld, int32_t ignore_index);

}  // namespace hone::kernels::cpu
