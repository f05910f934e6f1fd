#pragma once
// Position information that is computed, not learned: RoPE tables and ALiBi slopes.
#include <vector>

#include "hone/model/config.hpp"

namespace hone {

// RoPE inverse frequencies theta^(-2i/head_dim), i < head_dim/2, with Llama 3.1's
// scaling applied when the config has one.
std::vector<double> rope_inverse_frequencies(const ModelConfig& config);

// cos and sin of position·frequency, each [positions, head_dim/2] row-major.
struct RopeTables {
  std::vector<double> cos, sin;
};
RopeTables rope_tables(const ModelConfig& config, int64_t positions);

// MPT's ALiBi slopes (LLM Foundry's gen_slopes): 2^(-alibi_bias_max·k/n) for the
// next power of two n ≥ n_heads, interleaved when n_heads is not a power of two.
std::vector<double> alibi_slopes(int64_t n_heads, double alibi_bias_max);

}  // namespace hone
