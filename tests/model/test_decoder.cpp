// KV-cache decoding against the full forward pass, and sampling.
#include <cmath>

#include "hone/model/decoder.hpp"
#include "hone/model/sampling.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

ModelConfig family(const std::string& name) {
  ModelConfig c = model_preset(name);
  c.vocab_size = 50;
  c.max_seq_len = 40;
  c.init_std = 0.2;
  if (name == "llama_tiny") c.rope_scaling = {.factor = 4, .low_freq_factor = 1, .high_freq_factor = 4, .original_max_position = 16};
  return c;
}

std::vector<int32_t> tokens_of(int n, int seed) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 7 + seed * 13 + i * i) % 50);
  return t;
}

// Logits of every position of `tokens` from one forward pass.
Tensor full_logits(Transformer& m, const std::vector<int32_t>& tokens) {
  m.forward(Tensor::from(tokens, {1, int64_t(tokens.size())}));
  return m.logits().clone();
}

class DecoderTest : public ::testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(DecoderTest, TeacherForcedDecodingEqualsTheFullForwardPass) {
  const auto [name, dtype] = GetParam();
  Transformer m(family(name), dtype);
  m.init_weights(5);
  const double tolerance = dtype == DType::f64 ? 1e-12 : 1e-5;
  // Two sequences of different lengths decode side by side.
  const std::vector<int32_t> a = tokens_of(23, 1), b = tokens_of(17, 2);
  const Tensor full_a = full_logits(m, a), full_b = full_logits(m, b);
  const int64_t prompt_a = 9, prompt_b = 4;
  Decoder d(m, 2, 30);
  expect_close(d.prefill(0, std::span(a).first(prompt_a)), full_a[prompt_a - 1], tolerance, name + " prefill a");
  expect_close(d.prefill(1, std::span(b).first(prompt_b)), full_b[prompt_b - 1], tolerance, name + " prefill b");
  for (int64_t step = 0; step < 13; ++step) {
    const int64_t ia = prompt_a + step, ib = prompt_b + step;
    const std::vector<int64_t> slots = {0, 1};
    const std::vector<int32_t> feed = {a[size_t(ia)], b[size_t(ib)]};
    const Tensor logits = d.decode(slots, feed);
    expect_close(logits[0], full_a[ia], tolerance, fmt::format("{} decode a at {}", name, ia));
    expect_close(logits[1], full_b[ib], tolerance, fmt::format("{} decode b at {}", name, ib));
  }
  EXPECT_EQ(d.length(0), prompt_a + 13);
  EXPECT_THROW(d.prefill(0, std::vector<int32_t>(31, 1)), Error);  // does not fit the cache
}

// Prompts prefilled together (packed into rows of up to max_seq_len = 40
// tokens here: 23 + 9 in one, 17 in the next) give each its own logits and cache,
// and a copied slot decodes as the one it copies.
TEST_P(DecoderTest, PromptsPrefilledTogetherEqualTheirOwnForwardPasses) {
  const auto [name, dtype] = GetParam();
  Transformer m(family(name), dtype);
  m.init_weights(5);
  const double tolerance = dtype == DType::f64 ? 1e-12 : 1e-5;
  const std::vector<std::vector<int32_t>> texts = {tokens_of(30, 1), tokens_of(26, 2), tokens_of(20, 3)};
  const std::vector<int64_t> prompt_lengths = {23, 9, 17}, slots = {2, 0, 1};
  std::vector<Tensor> full;
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < texts.size(); ++i) {
    full.push_back(full_logits(m, texts[i]));
    prompts.emplace_back(texts[i].begin(), texts[i].begin() + prompt_lengths[i]);
  }
  Decoder d(m, 4, 30);
  const Tensor first = d.prefill(slots, prompts);
  ASSERT_EQ(first.shape(), Shape({3, 50}));
  for (size_t i = 0; i < texts.size(); ++i) {
    expect_close(first[int64_t(i)], full[i][prompt_lengths[i] - 1], tolerance, fmt::format("{} prefill {}", name, i));
    EXPECT_EQ(d.length(slots[i]), prompt_lengths[i]);
  }
  d.copy_slot(0, 3);  // slot 0 holds the second prompt
  for (int64_t step = 0; step < 3; ++step) {
    std::vector<int32_t> feed;
    for (size_t i = 0; i < texts.size(); ++i) feed.push_back(texts[i][size_t(prompt_lengths[i] + step)]);
    feed.push_back(feed[1]);
    const Tensor logits = d.decode(std::vector<int64_t>{2, 0, 1, 3}, feed);
    for (size_t i = 0; i < texts.size(); ++i) {
      expect_close(logits[int64_t(i)], full[i][prompt_lengths[i] + step], tolerance,
                   fmt::format("{} decode {} at step {}", name, i, step));
    }
    expect_close(logits[3], full[1][prompt_lengths[1] + step], tolerance, fmt::format("{} copied slot", name));
  }
}

// A prompt longer than a chunk of logits (64 rows here): prefill computes the
// head on its last row alone and leaves the model's chunking as it was.
TEST(Decoder, PrefillOfAPromptLongerThanAChunkOfLogits) {
  ModelConfig c = family("llama_tiny");
  c.max_seq_len = 100;
  Transformer m(c, DType::f64);
  m.init_weights(6);
  const std::vector<int32_t> text = tokens_of(91, 3), prompt(text.begin(), text.end() - 1);
  m.set_chunk_bytes(kNoChunks);
  const Tensor full = full_logits(m, text);
  m.set_chunk_bytes(1);
  {
    Decoder d(m, 1, 100);
    expect_close(d.prefill(0, prompt), full[89], 1e-12, "prefill");
    expect_close(d.decode(std::vector<int64_t>{0}, std::vector<int32_t>{text.back()})[0], full[90], 1e-12,
                 "decode");
  }
  EXPECT_EQ(m.chunk_bytes(), size_t(1));
}

INSTANTIATE_TEST_SUITE_P(Families, DecoderTest,
                         ::testing::Combine(::testing::Values("llama_tiny", "gpt2_tiny", "mpt_tiny"),
                                            ::testing::Values(DType::f64, DType::f32)));

TEST(Sampling, GreedyTopKAndTopPAndTemperature) {
  Generator rng(3);
  const std::vector<float> logits = {0.0f, std::log(3.0f), -1.0f, -5.0f};
  EXPECT_EQ(sample_token(logits, {.temperature = 0}, rng), 1);
  EXPECT_EQ(sample_token(logits, {.temperature = 1, .top_k = 1}, rng), 1);
  EXPECT_EQ(sample_token(logits, {.temperature = 1, .top_p = 0.1}, rng), 1);
  // Temperatures whose inverse overflows a float (or a double) are greedy, their limit.
  for (const double tiny : {1e-39, 1e-45, 1e-300, 4.9e-324}) {
    for (int i = 0; i < 20; ++i) EXPECT_EQ(sample_token(logits, {.temperature = tiny}, rng), 1) << tiny;
  }
  // top_k = 2 at temperature 1: P(1) = 3/4, P(0) = 1/4, nothing else.
  int ones = 0, others = 0;
  for (int i = 0; i < 20000; ++i) {
    const int32_t t = sample_token(logits, {.temperature = 1, .top_k = 2}, rng);
    ones += t == 1;
    others += t > 1;
  }
  EXPECT_NEAR(ones / 20000.0, 0.75, 0.015);
  EXPECT_EQ(others, 0);
  // A high temperature flattens: token 3 appears.
  int rare = 0;
  for (int i = 0; i < 2000; ++i) rare += sample_token(logits, {.temperature = 10}, rng) == 3;
  EXPECT_GT(rare, 200);
}

// transformers' repetition_penalty: a seen token's positive logit divided by
// it, a negative one multiplied, once however often it was seen.
TEST(Sampling, RepetitionPenaltyMakesSeenTokensLessLikely) {
  Generator rng(5);
  const std::vector<float> logits = {2.0f, 1.5f, -1.0f, -0.5f};
  const std::vector<int32_t> zero_twice = {0, 0};
  EXPECT_EQ(sample_token(logits, {.temperature = 0}, rng, zero_twice), 0) << "no penalty: the most likely";
  EXPECT_EQ(sample_token(logits, {.temperature = 0, .repetition_penalty = 1.2}, rng, zero_twice), 0);  // 1.67 > 1.5
  EXPECT_EQ(sample_token(logits, {.temperature = 0, .repetition_penalty = 1.4}, rng, zero_twice), 1);  // 1.43 < 1.5
  // Negative logits are multiplied: -0.5 x 3 falls below -1.
  const std::vector<float> negative = {-0.5f, -1.0f};
  EXPECT_EQ(sample_token(negative, {.temperature = 0, .repetition_penalty = 3}, rng, std::vector<int32_t>{0}), 1);
  // Sampling draws from the penalized softmax: logits {0, ln 3}, token 1 seen,
  // penalty 2: P(1) = sqrt(3) / (1 + sqrt(3)).
  const std::vector<float> two = {0.0f, std::log(3.0f)};
  const std::vector<int32_t> one = {1};
  int ones = 0;
  for (int i = 0; i < 20000; ++i)
    ones += sample_token(two, {.temperature = 1, .repetition_penalty = 2}, rng, one) == 1;
  EXPECT_NEAR(ones / 20000.0, std::sqrt(3.0) / (1 + std::sqrt(3.0)), 0.015);
  EXPECT_THROW(sample_token(logits, {.temperature = 0, .repetition_penalty = 2}, rng, std::vector<int32_t>{9}), Error);
}

// min_p (after top_k and top_p, as transformers): tokens less likely than
// min_p times the most likely one are dropped, the rest renormalized.
TEST(Sampling, MinPDropsTokensFarLessLikelyThanTheBest) {
  Generator rng(11);
  // Probabilities relative to the best: 1/3, 1, 1/6, 1/15.
  const std::vector<float> logits = {0.0f, std::log(3.0f), std::log(0.5f), std::log(0.2f)};
  for (const SamplingOptions& o : {SamplingOptions{.temperature = 1, .min_p = 0.2},
                                   SamplingOptions{.temperature = 1, .top_k = 3, .min_p = 0.2},
                                   SamplingOptions{.temperature = 1, .top_p = 0.99, .min_p = 0.2}}) {
    int ones = 0, dropped = 0;
    for (int i = 0; i < 20000; ++i) {
      const int32_t t = sample_token(logits, o, rng);
      ones += t == 1;
      dropped += t >= 2;
    }
    EXPECT_EQ(dropped, 0) << o.top_k << " " << o.top_p;
    EXPECT_NEAR(ones / 20000.0, 0.75, 0.015) << o.top_k << " " << o.top_p;
  }
  EXPECT_THROW(sample_token(logits, {.min_p = 1.5}, rng), Error);
}

// Draws by frequency against the softmax they sample: the whole vocabulary
// (drawn in id order, unsorted), top_k and top_p together, and a nucleus of
// hundreds of tied tokens (sorted past the first 64).
TEST(Sampling, FrequenciesMatchTheDistributionEachWayOfDrawing) {
  Generator rng(5);
  const std::vector<float> logits = {0.0f, std::log(3.0f), -1.0f, -5.0f};
  const double z = 1.0 + 3.0 + std::exp(-1.0) + std::exp(-5.0);
  std::vector<int> counts(4, 0);
  constexpr int kDraws = 40000;
  for (int i = 0; i < kDraws; ++i) ++counts[size_t(sample_token(logits, {.temperature = 1}, rng))];
  EXPECT_NEAR(counts[0] / double(kDraws), 1.0 / z, 0.01);
  EXPECT_NEAR(counts[1] / double(kDraws), 3.0 / z, 0.01);
  EXPECT_NEAR(counts[2] / double(kDraws), std::exp(-1.0) / z, 0.01);
  EXPECT_GT(counts[3], 0);
  // top_k 3 keeps {1, 0, 2} (weights 3, 1, 0.37); top_p 0.8 of that (3.49) needs 1 and 0.
  std::fill(counts.begin(), counts.end(), 0);
  for (int i = 0; i < kDraws; ++i) ++counts[size_t(sample_token(logits, {.temperature = 1, .top_k = 3, .top_p = 0.8}, rng))];
  EXPECT_NEAR(counts[1] / double(kDraws), 0.75, 0.01);
  EXPECT_EQ(counts[2] + counts[3], 0);
  // 1000 equal logits: the nucleus of half the mass is the 500 lowest ids (ties by id), drawn evenly.
  const std::vector<float> flat(1000, 0.5f);
  int low = 0, high = 0;
  for (int i = 0; i < 10000; ++i) {
    const int32_t t = sample_token(flat, {.temperature = 1, .top_p = 0.5}, rng);
    ASSERT_LT(t, 500);
    (t < 250 ? low : high) += 1;
  }
  EXPECT_NEAR(low / 10000.0, 0.5, 0.03);
  // The same seed, the same draws.
  Generator a(11), b(11);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(sample_token(flat, {.temperature = 0.7}, a), sample_token(flat, {.temperature = 0.7}, b));
  }
}

TEST(Generate, GreedyMatchesRepeatedFullForwardAndStopsOnStopTokens) {
  Transformer m(family("llama_tiny"), DType::f32);
  m.init_weights(9);
  const std::vector<int32_t> prompt = tokens_of(6, 3);
  GenerationOptions o{.max_new_tokens = 8, .sampling = {.temperature = 0}};
  const Generation g = generate(m, {prompt, tokens_of(3, 4)}, o);
  ASSERT_EQ(g.completions.size(), 2u);
  EXPECT_EQ(g.completions[0].size(), 8u);
  std::vector<int32_t> seq = prompt;
  for (int i = 0; i < 8; ++i) {
    const Tensor logits = full_logits(m, seq);
    const auto last = logits[int64_t(seq.size()) - 1].to_vector<float>();
    seq.push_back(int32_t(std::max_element(last.begin(), last.end()) - last.begin()));
    EXPECT_EQ(g.completions[0][size_t(i)], seq.back()) << "token " << i;
  }
  EXPECT_EQ(g.generated_tokens, 16);
  // Stopping on the third greedy token keeps it and ends there.
  o.stop_tokens = {g.completions[0][2]};
  const Generation stopped = generate(m, {prompt}, o);
  EXPECT_LE(stopped.completions[0].size(), 3u);
  EXPECT_EQ(stopped.completions[0].back(), g.completions[0][2]);
  // With a repetition penalty, each sequence's own tokens so far are penalized
  // (the second prompt decodes beside the first, with its own).
  o = {.max_new_tokens = 8, .sampling = {.temperature = 0, .repetition_penalty = 5.0}};
  const Generation penalized = generate(m, {prompt, tokens_of(3, 4)}, o);
  seq = prompt;
  Generator unused(0);
  for (int i = 0; i < 8; ++i) {
    const Tensor logits = full_logits(m, seq);
    seq.push_back(sample_token(logits[int64_t(seq.size()) - 1].to_vector<float>(), o.sampling, unused, seq));
    EXPECT_EQ(penalized.completions[0][size_t(i)], seq.back()) << "token " << i;
  }
  EXPECT_NE(penalized.completions[0], g.completions[0]);
  // Sampling is reproducible from the seed.
  o = {.max_new_tokens = 10, .sampling = {.temperature = 1.0}, .seed = 42};
  const Generation sampled = generate(m, {prompt}, o);
  EXPECT_EQ(generate(m, {prompt}, o).completions, sampled.completions);
  // Each sequence draws from its own stream: the same alone or beside others
  // (which draw more or fewer tokens), and another stream draws anew.
  o.streams = {1, 0, 2};
  o.stop_tokens = {sampled.completions[0][1]};
  const Generation beside = generate(m, {tokens_of(3, 4), prompt, tokens_of(5, 6)}, o);
  o.stop_tokens.clear();
  EXPECT_EQ(beside.completions[1], std::vector(sampled.completions[0].begin(), sampled.completions[0].begin() + 2));
  o.streams = {1};
  EXPECT_NE(generate(m, {prompt}, o).completions, sampled.completions);
  o.streams.clear();
  // A completion stops at max_seq_len (40: the 6-token prompt, then 35 new
  // tokens, the last of which is never fed back), as vLLM's at max_model_len.
  o.max_new_tokens = 100;
  EXPECT_EQ(generate(m, {prompt}, o).completions[0].size(), 35u);
  EXPECT_THROW(generate(m, {tokens_of(41, 3)}, o), Error);  // a prompt longer than max_seq_len
  // A vocabulary padded past the tokenizer's: ids from its first vocab_size only.
  o = {.max_new_tokens = 30, .sampling = {.temperature = 5.0}, .seed = 3, .vocab_size = 4};
  for (const auto& completion : generate(m, {prompt, tokens_of(3, 4)}, o).completions) {
    for (const int32_t id : completion) EXPECT_LT(id, 4);
  }
}

// What a completion ended by stop strings keeps: the text before the earliest.
TEST(Generate, TextBeforeStopEndsAtTheEarliestOfThem) {
  EXPECT_EQ(text_before_stop("one. Question: two", {"Question:", "."}), "one");
  EXPECT_EQ(text_before_stop("one. Question: two", {"Answer:"}), "one. Question: two");
  EXPECT_EQ(text_before_stop("one", {""}), "one");  // an empty stop stops nothing
  EXPECT_EQ(text_before_stop("one", {}), "one");
}

}  // namespace
}  // namespace hone::test
