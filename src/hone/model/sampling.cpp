#include "hone/model/sampling.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "hone/model/decoder.hpp"

namespace hone {

int32_t sample_token(std::span<const float> logits, const SamplingOptions& o, Generator& rng) {
  HONE_CHECK(!logits.empty(), "sampling from empty logits");
  HONE_CHECK(o.temperature >= 0 && o.top_k >= 0 && o.top_p > 0 && o.top_p <= 1,
             "sampling needs temperature >= 0, top_k >= 0 and top_p in (0, 1]");
  if (o.temperature == 0) return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  // Most likely first; ties by id, so a draw depends on nothing but the logits and the seed.
  auto more_likely = [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b); };
  size_t keep = o.top_k > 0 ? std::min(size_t(o.top_k), order.size()) : order.size();
  std::partial_sort(order.begin(), order.begin() + ptrdiff_t(keep), order.end(), more_likely);
  std::vector<double> probs(keep);
  const double max = logits[size_t(order[0])];
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += probs[i] = std::exp((logits[size_t(order[i])] - max) / o.temperature);
  if (o.top_p < 1) {
    double cumulative = 0;
    size_t nucleus = 0;
    while (nucleus < keep && cumulative < o.top_p * sum) cumulative += probs[nucleus++];
    keep = std::max<size_t>(nucleus, 1);
    sum = std::accumulate(probs.begin(), probs.begin() + ptrdiff_t(keep), 0.0);
  }
  double u = rng.next_double() * sum;
  for (size_t i = 0; i < keep; ++i) {
    if ((u -= probs[i]) < 0) return order[i];
  }
  return order[keep - 1];
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
  const int64_t capacity = int64_t(longest) + o.max_new_tokens;
  HONE_CHECK(capacity <= model.config().max_seq_len,
             "a {}-token prompt plus max_new_tokens {} exceeds the model's max_seq_len {}", longest,
             o.max_new_tokens, model.config().max_seq_len);
  using Clock = std::chrono::steady_clock;
  Decoder decoder(model, int64_t(prompts.size()), capacity);
  Generator rng(o.seed, /*stream=*/7);
  Generation g;
  g.completions.resize(prompts.size());
  g.cache_bytes = decoder.cache_bytes();
  std::vector<int64_t> active;
  std::vector<int32_t> next;
  auto start = Clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Tensor logits = decoder.prefill(int64_t(i), prompts[i]);
    g.prompt_tokens += int64_t(prompts[i].size());
    next.push_back(sample_token(logits.to_vector<float>(), o.sampling, rng));
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
      ++g.generated_tokens;
      const bool stop = std::find(o.stop_tokens.begin(), o.stop_tokens.end(), next[k]) != o.stop_tokens.end();
      if (!stop && int64_t(out.size()) < o.max_new_tokens) {
        still_active.push_back(active[k]);
        feed.push_back(next[k]);
      }
    }
    active = std::move(still_active);
    if (active.empty()) break;
    const Tensor logits = decoder.decode(active, feed);
    const auto values = logits.to_vector<float>();
    const size_t vocab = size_t(model.config().vocab_size);
    next.clear();
    for (size_t k = 0; k < active.size(); ++k) {
      next.push_back(sample_token(std::span(values).subspan(k * vocab, vocab), o.sampling, rng));
    }
  }
  g.decode_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return g;
}

}  // namespace hone
