#include "hone/core/parallel.hpp"

#include <omp.h>

#include "hone/core/error.hpp"

namespace hone {

int num_threads() { return omp_get_max_threads(); }

void set_num_threads(int threads) {
  HONE_CHECK(threads >= 1, "thread count must be at least 1, got {}", threads);
  omp_set_num_threads(threads);
}

}  // namespace hone
