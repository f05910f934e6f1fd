#include "hone/model/sampling.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>

#include "hone/kernels/cpu/fast_math.hpp"
#include "hone/model/decoder.hpp"

namespace hone {

namespace {

// Draws from the tokens `ids` (in that order) by their weights, which sum to `sum`.
int32_t draw(std::span<const int32_t> ids, std::span<const float> weight, double sum, Generator& rng) {
  double u = rng.next_double() * sum;
  for (const int32_t id : ids) {
    if ((u -= weight[size_t(id)]) < 0) return id;
  }
  // Rounding left u at or above 0: the last token that can be drawn.
  for (size_t i = ids.size(); i-- > 1;) {
    if (weight[size_t(ids[i])] > 0) return ids[i];
  }
  return ids[0];
}

}  // namespace

std::string text_before_stop(std::string_view text, const std::vector<std::string>& stops) {
  size_t end = text.size();
  for (const std::string& stop : stops) {
    if (!stop.empty()) end = std::min(end, text.find(stop));
  }
  return std::string(text.substr(0, end));
}

int32_t sample_token(std::span<const float> given, const SamplingOptions& o, Generator& rng,
                     std::span<const int32_t> seen) {
  HONE_CHECK(!given.empty(), "sampling from empty logits");
  HONE_CHECK(o.temperature >= 0 && o.top_k >= 0 && o.top_p > 0 && o.top_p <= 1 && o.min_p >= 0 && o.min_p <= 1 &&
                 o.repetition_penalty > 0,
             "sampling needs temperature >= 0, top_k >= 0, top_p in (0, 1], min_p in [0, 1] and repetition_penalty > 0");
  std::vector<float> penalized;
  if (o.repetition_penalty != 1 && !seen.empty()) {
    penalized.assign(given.begin(), given.end());
    std::vector<bool> done(penalized.size());  // each token once, however often it was seen
    const auto penalty = float(o.repetition_penalty);
    for (const int32_t id : seen) {
      HONE_CHECK(id >= 0 && size_t(id) < penalized.size(), "token {} beyond the vocabulary of {}", id,
                 penalized.size());
      if (done[size_t(id)]) continue;
      done[size_t(id)] = true;
      float& l = penalized[size_t(id)];
      l = l < 0 ? l * penalty : l / penalty;
    }
  }
  const std::span<const float> logits = penalized.empty() ? given : std::span<const float>(penalized);
  // Greedy at temperature 0, and at one so small that 1/temperature overflows a
  // float (greedy is its limit; the weights below would be NaN).
  const float inverse_temperature = o.temperature == 0 ? 0.0f : float(1.0 / o.temperature);
  if (o.temperature == 0 || !std::isfinite(inverse_temperature)) {
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  const size_t vocab = logits.size();
  // Every token's weight exp((logit - max) / temperature), in id order.
  const float max = *std::max_element(logits.begin(), logits.end());
  std::vector<float> weight(vocab);
  for (size_t i = 0; i < vocab; ++i) weight[i] = kernels::cpu::fast_exp((logits[i] - max) * inverse_temperature);
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  const size_t top_k = o.top_k > 0 ? std::min(size_t(o.top_k), vocab) : vocab;
  const auto sum_of = [&](size_t n) {
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += weight[size_t(order[i])];
    return sum;
  };
  // A draw among the first n of `order`; min_p last, as transformers applies it:
  // the most likely token's weight is 1, so it drops weights below min_p.
  const auto draw_first = [&](size_t n) {
    if (o.min_p > 0)
      for (size_t i = 0; i < n; ++i) weight[size_t(order[i])] *= weight[size_t(order[i])] >= o.min_p;
    return draw(std::span(order).first(n), weight, sum_of(n), rng);
  };
  // Nothing left out: a draw over the whole vocabulary in id order, no sorting.
  if (top_k == vocab && o.top_p == 1) return draw_first(vocab);

  // Most likely first; ties by id, so a draw depends on nothing but the logits and the seed.
  const auto more_likely = [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  };
  const auto first = order.begin();
  if (top_k < vocab) std::nth_element(first, first + ptrdiff_t(top_k), order.end(), more_likely);
  if (o.top_p == 1) {
    std::sort(first, first + ptrdiff_t(top_k), more_likely);
    return draw_first(top_k);
  }
  const double candidates_sum = sum_of(top_k);
  // top_p: the fewest most likely candidates whose weight reaches top_p of
  // theirs, sorted only as far as needed (a few dozen tokens, usually).
  const double target = o.top_p * candidates_sum;
  for (size_t sorted = std::min<size_t>(64, top_k);; sorted = std::min(4 * sorted, top_k)) {
    std::partial_sort(first, first + ptrdiff_t(sorted), first + ptrdiff_t(top_k), more_likely);
    double cumulative = 0;
    size_t nucleus = 0;
    while (nucleus < sorted && cumulative < target) cumulative += weight[size_t(order[nucleus++])];
    if (cumulative >= target || sorted == top_k) {
      return draw_first(std::max<size_t>(nucleus, 1));
    }
  }
}

Generation generate(Transformer& model, const std::vector<std::vector<int32_t>>& prompts,
                    const GenerationOptions& o) {
  HONE_CHECK(!prompts.empty(), "nothing to generate: no prompts");
  HONE_CHECK(o.max_new_tokens >= 1, "max_new_tokens must be at least 1, got {}", o.max_new_tokens);
  size_t longest = 0;
  for (const auto& p : prompts) {
    HONE_CHECK(!p.empty(), "a prompt is empty: it needs at least one token");
    longest = std::max(longest, p.size());
  }
  // The last new token is never fed back: a sequence takes its prompt and
  // max_new_tokens - 1 positions, and stops at max_seq_len (as vLLM's at max_model_len).
  const int64_t max_seq_len = model.config().max_seq_len;
  HONE_CHECK(int64_t(longest) <= max_seq_len, "a {}-token prompt is longer than the model's max_seq_len {}", longest,
             max_seq_len);
  const int64_t capacity = int64_t(longest) + std::min(o.max_new_tokens - 1, max_seq_len - int64_t(longest));
  const auto new_tokens_of = [&](size_t i) {
    return std::min(o.max_new_tokens, max_seq_len - int64_t(prompts[i].size()) + 1);
  };
  using Clock = std::chrono::steady_clock;
  Decoder decoder(model, int64_t(prompts.size()), capacity);
  HONE_CHECK(o.streams.empty() || o.streams.size() == prompts.size(), "{} sampling streams for {} prompts",
             o.streams.size(), prompts.size());
  std::vector<Generator> rngs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    rngs.emplace_back(o.seed, random_stream(RandomUse::sampling, o.streams.empty() ? i : o.streams[i]));
  }
  Generation g;
  g.completions.resize(prompts.size());
  g.cache_bytes = decoder.cache_bytes();
  std::vector<int64_t> active;
  const int64_t vocab_size = model.config().vocab_size;
  HONE_CHECK(o.vocab_size <= vocab_size, "generation draws from {} ids, more than the model's vocabulary of {}",
             o.vocab_size, vocab_size);
  const size_t drawn = size_t(o.vocab_size > 0 ? o.vocab_size : vocab_size);
  std::vector<int32_t> next;
  auto start = Clock::now();
  // Each sequence so far (prompt, then completion), for the repetition penalty.
  std::vector<std::vector<int32_t>> seen(prompts.begin(), prompts.end());
  // Each distinct prompt is prefilled once, all together; a repeated one (a
  // prompt drawn from several times) copies its cache and logits.
  std::map<std::vector<int32_t>, size_t> distinct;  // prompt -> its row of the prefill
  std::vector<size_t> prefill_row_of;
  std::vector<int64_t> prefill_slots;
  std::vector<std::vector<int32_t>> prefill_prompts;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto [it, is_new] = distinct.try_emplace(prompts[i], prefill_prompts.size());
    if (is_new) {
      prefill_slots.push_back(int64_t(i));
      prefill_prompts.push_back(prompts[i]);
      g.prompt_tokens += int64_t(prompts[i].size());
    }
    prefill_row_of.push_back(it->second);
  }
  const std::vector<float> first_logits = decoder.prefill(prefill_slots, prefill_prompts).to_vector<float>();
  const size_t vocab = size_t(model.config().vocab_size);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const size_t row = prefill_row_of[i];
    if (prefill_slots[row] != int64_t(i)) decoder.copy_slot(prefill_slots[row], int64_t(i));
    next.push_back(sample_token(std::span(first_logits).subspan(row * vocab, drawn), o.sampling, rngs[i], seen[i]));
    active.push_back(int64_t(i));
  }
  g.prefill_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  start = Clock::now();
  while (!active.empty()) {
    std::vector<int64_t> still_active;
    std::vector<int32_t> feed;
    for (size_t k = 0; k < active.size(); ++k) {
      auto& out = g.completions[size_t(active[k])];
      out.push_back(next[k]);
      seen[size_t(active[k])].push_back(next[k]);
      ++g.generated_tokens;
      const bool stop = std::find(o.stop_tokens.begin(), o.stop_tokens.end(), next[k]) != o.stop_tokens.end() ||
                        (o.finished && o.finished(size_t(active[k]), out));
      if (!stop && int64_t(out.size()) < new_tokens_of(size_t(active[k]))) {
        still_active.push_back(active[k]);
        feed.push_back(next[k]);
      }
    }
    active = std::move(still_active);
    if (active.empty()) break;
    const Tensor logits = decoder.decode(active, feed);
    const auto values = logits.to_vector<float>();
    next.clear();
    for (size_t k = 0; k < active.size(); ++k) {
      const std::span<const float> row = std::span(values).subspan(k * vocab, drawn);
      next.push_back(sample_token(row, o.sampling, rngs[size_t(active[k])], seen[size_t(active[k])]));
    }
  }
  g.decode_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return g;
}

}  // namespace hone
