#pragma once
// Python's `random.Random` (CPython's Mersenne Twister, seeded from an integer
// as random.seed(int) seeds it), for drawing exactly what a Python tool draws:
// lm-evaluation-harness picks its few-shot examples with Random(1234).sample.
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace hone {

class PythonRandom {
 public:
  explicit PythonRandom(uint64_t seed);

  // Python's getrandbits(bits), for 0 <= bits <= 64.
  uint64_t getrandbits(int bits);
  // Python's _randbelow(n): uniform in [0, n), n > 0, by rejection on bit_length(n) bits.
  uint64_t randbelow(uint64_t n);
  // The indexes random.sample(range(population), count) returns, in its order
  // (its pool or set algorithm, chosen by the same sizes).
  std::vector<uint64_t> sample(uint64_t population, uint64_t count);

 private:
  uint32_t next_u32();
  std::array<uint32_t, 624> state_{};
  size_t index_ = 624;
};

}  // namespace hone
