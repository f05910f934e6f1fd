#pragma once
// Threading: every CPU kernel, oneDNN and OpenMP share one thread count.
#include <cstdint>

namespace hone {

int num_threads();
void set_num_threads(int threads);

// Reductions over many rows (bias and norm-weight gradients, global norms) sum
// fixed-size chunks, then add the chunk results in order: the result is the same
// for any number of threads, which keeps runs reproducible.
constexpr int64_t kReductionChunkRows = 256;

}  // namespace hone
