#pragma once
// Choosing the next token from logits, and the generation loop over a Decoder.
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hone/core/rng.hpp"
#include "hone/model/transformer.hpp"

namespace hone {

struct SamplingOptions {
  double temperature = 0.8;  // 0: greedy (the most likely token)
  int64_t top_k = 0;         // keep the k most likely tokens (0: all)
  double top_p = 1.0;        // keep the smallest set whose probability reaches p
  double min_p = 0.0;        // then drop tokens less likely than min_p times the most likely one
  // Tokens already in the sequence (prompt and completion) made less likely, as
  // transformers' repetition_penalty (Keskar et al. 2019): a positive logit is
  // divided by it, a negative one multiplied, before everything else (1: off).
  double repetition_penalty = 1.0;
};

// The next token; `seen`: the tokens of the sequence so far (for repetition_penalty).
int32_t sample_token(std::span<const float> logits, const SamplingOptions& options, Generator& rng,
                     std::span<const int32_t> seen = {});

struct GenerationOptions {
  int64_t max_new_tokens = 128;
  SamplingOptions sampling;
  uint64_t seed = 0;
  // Each prompt's Philox stream under `seed` (empty: its index in `prompts`):
  // a sequence draws from its own, so what it samples does not depend on the
  // others in its batch, how many there are or when they stop.
  std::vector<uint64_t> streams;
  std::vector<int32_t> stop_tokens;  // ends a sequence (the stop token is kept)
  // > 0: tokens are drawn from the first this many ids only (a model's
  // vocabulary padded past its tokenizer's, GPT-2's 50304 for 50257, has rows no text has).
  int64_t vocab_size = 0;
  // When given, also ends sequence i once it returns true for its completion so
  // far (e.g. a stop string in the decoded text).
  std::function<bool(size_t i, const std::vector<int32_t>& completion)> finished;
};

struct Generation {
  std::vector<std::vector<int32_t>> completions;  // new tokens of each prompt
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  size_t cache_bytes = 0;
};

// The text before the first of `stops` in it, all of it where none occurs: what
// a completion ended by a stop string keeps (vLLM's `stop`, the harness's `until`).
std::string text_before_stop(std::string_view text, const std::vector<std::string>& stops);

// Generates a completion for each prompt; all prompts decode together.
Generation generate(Transformer& model, const std::vector<std::vector<int32_t>>& prompts,
                    const GenerationOptions& options);

}  // namespace hone
