#include "hone/model/positional.hpp"

#include <cmath>
#include <numbers>

namespace hone {

std::vector<double> rope_inverse_frequencies(const ModelConfig& config) {
  const int64_t half = config.head_dim() / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[size_t(i)] = std::pow(config.rope_theta, -2.0 * double(i) / double(config.head_dim()));
  }
  const RopeScaling& s = config.rope_scaling;
  if (!s.enabled()) return inv_freq;
  // Wavelengths shorter than the high-frequency bound keep their frequency, longer
  // than the low-frequency bound are divided by `factor`, and in between the two
  // are blended smoothly (Llama 3.1's apply_scaling).
  const double old_context = double(s.original_max_position);
  const double low_freq_wavelen = old_context / s.low_freq_factor;
  const double high_freq_wavelen = old_context / s.high_freq_factor;
  for (double& f : inv_freq) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen < high_freq_wavelen) continue;
    if (wavelen > low_freq_wavelen) {
      f /= s.factor;
    } else {
      const double smooth = (old_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1.0 - smooth) * f / s.factor + smooth * f;
    }
  }
  return inv_freq;
}

RopeTables rope_tables(const ModelConfig& config, int64_t positions) {
  const std::vector<double> inv_freq = rope_inverse_frequencies(config);
  const size_t half = inv_freq.size();
  RopeTables tables{std::vector<double>(size_t(positions) * half), std::vector<double>(size_t(positions) * half)};
  for (int64_t p = 0; p < positions; ++p) {
    for (size_t i = 0; i < half; ++i) {
      const double angle = double(p) * inv_freq[i];
      tables.cos[size_t(p) * half + i] = std::cos(angle);
      tables.sin[size_t(p) * half + i] = std::sin(angle);
    }
  }
  return tables;
}

std::vector<double> alibi_slopes(int64_t n_heads, double alibi_bias_max) {
  int64_t padded = 1;
  while (padded < n_heads) padded *= 2;
  std::vector<double> slopes(static_cast<size_t>(padded));
  for (int64_t k = 1; k <= padded; ++k) {
    slopes[size_t(k - 1)] = 1.0 / std::pow(2.0, double(k) * alibi_bias_max / double(padded));
  }
  if (padded == n_heads) return slopes;
  std::vector<double> interleaved;
  for (int64_t k = 1; k < padded; k += 2) interleaved.push_back(slopes[size_t(k)]);
  for (int64_t k = 0; k < padded; k += 2) interleaved.push_back(slopes[size_t(k)]);
  interleaved.resize(size_t(n_heads));
  return interleaved;
}

}  // namespace hone
