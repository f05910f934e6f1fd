#include "hone/core/rng.hpp"

#include <cmath>
#include <numbers>

#include "hone/core/error.hpp"

namespace hone {

namespace {

// A double in (0, 1] from 64 random bits: never 0, so log() is safe.
double unit_open_zero(uint32_t hi, uint32_t lo) {
  uint64_t bits = (uint64_t(hi) << 32 | lo) >> 11;
  return (double(bits) + 1.0) * (1.0 / 9007199254740992.0);
}

}  // namespace

template <typename T>
void Generator::normal(std::span<T> out, double mean, double std) {
  const int64_t n = int64_t(out.size());
  const int64_t pairs = (n + 1) / 2;
  const State s = state_;
#pragma omp parallel for schedule(static) if (pairs > 4096)
  for (int64_t p = 0; p < pairs; ++p) {
    auto r = philox4x32(s.seed, s.offset + uint64_t(p), s.stream);
    // Box-Muller: two uniforms give two independent normals.
    double radius = std::sqrt(-2.0 * std::log(unit_open_zero(r[0], r[1])));
    double angle = 2.0 * std::numbers::pi * unit_open_zero(r[2], r[3]);
    out[size_t(2 * p)] = T(mean + std * radius * std::cos(angle));
    if (2 * p + 1 < n) out[size_t(2 * p + 1)] = T(mean + std * radius * std::sin(angle));
  }
  state_.offset += uint64_t(pairs);
}

template <typename T>
void Generator::uniform(std::span<T> out, double low, double high) {
  const int64_t n = int64_t(out.size());
  const int64_t pairs = (n + 1) / 2;
  const State s = state_;
#pragma omp parallel for schedule(static) if (pairs > 4096)
  for (int64_t p = 0; p < pairs; ++p) {
    auto r = philox4x32(s.seed, s.offset + uint64_t(p), s.stream);
    out[size_t(2 * p)] = T(low + (high - low) * (1.0 - unit_open_zero(r[0], r[1])));
    if (2 * p + 1 < n) out[size_t(2 * p + 1)] = T(low + (high - low) * (1.0 - unit_open_zero(r[2], r[3])));
  }
  state_.offset += uint64_t(pairs);
}

PhiloxBlock Generator::next_block() {
  return philox4x32(state_.seed, state_.offset++, state_.stream);
}

uint64_t Generator::next_u64() {
  auto r = next_block();
  return uint64_t(r[0]) << 32 | r[1];
}

double Generator::next_double() {
  auto r = next_block();
  return 1.0 - unit_open_zero(r[0], r[1]);
}

uint64_t Generator::next_below(uint64_t bound) {
  HONE_ASSERT(bound > 0);
  // Rejection sampling removes the modulo bias.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x;
  do {
    x = next_u64();
  } while (x >= limit);
  return x % bound;
}

template void Generator::normal<float>(std::span<float>, double, double);
template void Generator::normal<double>(std::span<double>, double, double);
template void Generator::uniform<float>(std::span<float>, double, double);
template void Generator::uniform<double>(std::span<double>, double, double);

}  // namespace hone
