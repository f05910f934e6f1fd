#include "hone/core/python_random.hpp"

#include <bit>
#include <cmath>
#include <unordered_set>

#include "hone/core/error.hpp"

namespace hone {

namespace {
constexpr size_t kN = 624, kM = 397;
}  // namespace

PythonRandom::PythonRandom(uint64_t seed) {
  // init_genrand(19650218), then init_by_array with the seed's 32-bit words, least significant first.
  std::vector<uint32_t> key{uint32_t(seed)};
  if (seed >> 32) key.push_back(uint32_t(seed >> 32));
  std::array<uint32_t, kN>& mt = state_;
  mt[0] = 19650218u;
  for (size_t i = 1; i < kN; ++i) mt[i] = 1812433253u * (mt[i - 1] ^ (mt[i - 1] >> 30)) + uint32_t(i);
  size_t i = 1, j = 0;
  for (size_t k = std::max(kN, key.size()); k > 0; --k) {
    mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + key[j] + uint32_t(j);
    if (++i >= kN) {
      mt[0] = mt[kN - 1];
      i = 1;
    }
    if (++j >= key.size()) j = 0;
  }
  for (size_t k = kN - 1; k > 0; --k) {
    mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - uint32_t(i);
    if (++i >= kN) {
      mt[0] = mt[kN - 1];
      i = 1;
    }
  }
  mt[0] = 0x80000000u;
}

uint32_t PythonRandom::next_u32() {
  std::array<uint32_t, kN>& mt = state_;
  if (index_ >= kN) {
    const auto twist = [&](size_t k, size_t next, size_t ahead) {
      const uint32_t y = (mt[k] & 0x80000000u) | (mt[next] & 0x7fffffffu);
      mt[k] = mt[ahead] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    };
    for (size_t k = 0; k < kN; ++k) twist(k, (k + 1) % kN, (k + kM) % kN);
    index_ = 0;
  }
  uint32_t y = mt[index_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  return y ^ (y >> 18);
}

uint64_t PythonRandom::getrandbits(int bits) {
  HONE_CHECK(bits >= 0 && bits <= 64, "getrandbits({}): 0 to 64 bits", bits);
  // 32-bit words, least significant first; the last keeps its high bits.
  uint64_t value = 0;
  for (int shift = 0; bits > 0; shift += 32, bits -= 32) {
    uint64_t word = next_u32();
    if (bits < 32) word >>= 32 - bits;
    value |= word << shift;
  }
  return value;
}

uint64_t PythonRandom::randbelow(uint64_t n) {
  HONE_CHECK(n > 0, "randbelow(0)");
  const int bits = std::bit_width(n);
  uint64_t r = getrandbits(bits);
  while (r >= n) r = getrandbits(bits);
  return r;
}

std::vector<uint64_t> PythonRandom::sample(uint64_t population, uint64_t count) {
  HONE_CHECK(count <= population, "sample of {} from {}: larger than the population", count, population);
  std::vector<uint64_t> result;
  // Python keeps a pool when the population is small against the sample, else a set of the drawn.
  uint64_t set_size = 21;
  if (count > 5) set_size += uint64_t(std::pow(4.0, std::ceil(std::log(double(count) * 3) / std::log(4.0))));
  if (population <= set_size) {
    std::vector<uint64_t> pool(population);
    for (uint64_t i = 0; i < population; ++i) pool[i] = i;
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t j = randbelow(population - i);
      result.push_back(pool[j]);
      pool[j] = pool[population - i - 1];
    }
  } else {
    std::unordered_set<uint64_t> selected;
    for (uint64_t i = 0; i < count; ++i) {
      uint64_t j = randbelow(population);
      while (selected.count(j)) j = randbelow(population);
      selected.insert(j);
      result.push_back(j);
    }
  }
  return result;
}

}  // namespace hone
