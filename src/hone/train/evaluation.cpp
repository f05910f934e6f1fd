#include "hone/train/evaluation.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "hone/core/error.hpp"
#include "hone/model/sampling.hpp"

namespace hone {

double LossEvaluation::perplexity() const { return std::exp(loss); }

LossEvaluation evaluate_loss(Transformer& model, data::BatchSource& source, int64_t max_batches,
                             const std::function<void(int64_t done)>& progress) {
  source.rewind();
  const EvaluationMode evaluating(model);
  double sum = 0;
  int64_t tokens = 0;
  for (int64_t i = 0; i < max_batches && !source.pass_done(); ++i) {
    if (progress) progress(i);
    const Batch b = source.next().to(model.device());
    const ops::LossSum s = model.forward(b.tokens, b.targets, b.positions);
    sum += s.sum;
    tokens += s.tokens;
  }
  return {sum / double(std::max<int64_t>(tokens, 1)), tokens};
}

namespace {

// A UTF-8 text's length in code points, as Python's len() counts the choice for acc_norm.
double characters(const std::string& text) {
  const auto starts_a_character = [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; };
  return double(std::count_if(text.begin(), text.end(), starts_a_character));
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// A context's tokens and its ending's, paired as lm-evaluation-harness pairs
// them: the ending follows after one space (its target_delimiter) unless either
// side already has whitespace at the seam, the context's trailing whitespace
// goes to the ending, and the ending's tokens are those of the whole text after
// the context's. An empty context is BOS (else the end-of-text token), the
// harness's prefix_token_id, and the ending still follows its space.
struct EncodedChoice {
  std::vector<int32_t> context, ending;
};

EncodedChoice encode_choice(const Tokenizer& tokenizer, std::string context, const std::string& ending) {
  std::string seam;
  while (!context.empty() && is_space(context.back())) {
    seam.insert(seam.begin(), context.back());
    context.pop_back();
  }
  EncodedChoice encoded{.context = tokenizer.encode(context), .ending = {}};
  if (encoded.context.empty()) {
    const std::optional<int32_t> prefix = tokenizer.bos_id() ? tokenizer.bos_id() : tokenizer.eos_id();
    HONE_CHECK(prefix.has_value(), "a context is empty and the tokenizer has no BOS or end-of-text token");
    encoded.context = {*prefix};
  }
  // An empty ending is the delimiter alone, as the harness's " " + "", after an empty context too.
  const bool delimit = seam.empty() && (ending.empty() || !is_space(ending.front()));
  std::vector<int32_t> whole = tokenizer.encode(context + seam + (delimit ? " " : "") + ending);
  if (context.empty()) whole.insert(whole.begin(), encoded.context.begin(), encoded.context.end());
  const size_t shared = std::min(encoded.context.size(), whole.size());
  encoded.ending.assign(whole.begin() + std::ptrdiff_t(shared), whole.end());
  HONE_CHECK(!encoded.ending.empty(), "an ending tokenizes to nothing after its context: '{}'", ending);
  return encoded;
}

// encode_choice for one of `item`'s choices, checked to fit the model: errors name the item.
EncodedChoice encoded_choice_of(const Tokenizer& tokenizer, const MultipleChoiceItem& item, const std::string& context,
                                const std::string& ending, int64_t max_seq_len) {
  try {
    EncodedChoice choice = encode_choice(tokenizer, context, ending);
    HONE_CHECK(int64_t(choice.ending.size()) <= max_seq_len, "an ending of {} tokens does not fit max_seq_len {}",
               choice.ending.size(), max_seq_len);
    return choice;
  } catch (const Error& e) {
    fail("{}: {}", item.where.empty() ? std::string("an item") : item.where, e.what());
  }
}

// Context then ending, cut from the left to at most `inputs` + 1 tokens: the
// model reads all but the last, which is only predicted (as the harness cuts
// (context + continuation)[-(max_length + 1):][:-1]).
struct FittedRow {
  std::vector<int32_t> tokens;
  int64_t first_ending = 0;  // position of the ending's first token
};

// The ending fits (encoded_choice_of checked it against max_seq_len, which `inputs` is at most).
FittedRow fitted_row(const EncodedChoice& choice, int64_t inputs) {
  std::vector<int32_t> all = choice.context;
  all.insert(all.end(), choice.ending.begin(), choice.ending.end());
  const size_t start = all.size() > size_t(inputs + 1) ? all.size() - size_t(inputs + 1) : 0;
  FittedRow row{.tokens = std::vector<int32_t>(all.begin() + std::ptrdiff_t(start), all.end())};
  row.first_ending = int64_t(row.tokens.size() - choice.ending.size());
  return row;
}

// A choice's ending scored: Σ log p(ending token | all before it), and (when
// asked) whether every ending token was the model's most likely.
struct EndingScore {
  double log_likelihood = 0;
  bool greedy = true;
};

// All choices in one forward pass: one right-padded row each, the output head
// and the loss run on the rows that predict the endings' tokens only.
std::vector<EndingScore> score_endings(Transformer& model, const std::vector<EncodedChoice>& choices,
                                       bool check_greedy) {
  size_t longest = 0;
  for (const EncodedChoice& c : choices) longest = std::max(longest, c.context.size() + c.ending.size());
  const int64_t rows = int64_t(choices.size());
  // The model's inputs: every token but the last of the longest pair.
  const int64_t seq = std::min<int64_t>(model.config().max_seq_len, int64_t(longest) - 1);
  Tensor tokens = Tensor::zeros({rows, seq}, DType::i32);
  std::vector<std::vector<int32_t>> targets;
  std::vector<Transformer::RowRange> ranges;
  for (int64_t r = 0; r < rows; ++r) {
    const FittedRow row = fitted_row(choices[size_t(r)], seq);
    std::copy(row.tokens.begin(), row.tokens.end() - 1, tokens.data<int32_t>() + r * seq);
    // Position t predicts token t + 1: the rows from the one before the ending to the one before the last.
    targets.emplace_back(row.tokens.begin() + row.first_ending, row.tokens.end());
    ranges.push_back({.first = r * seq + row.first_ending - 1, .count = int64_t(targets.back().size())});
  }
  const std::vector<Tensor> logits = [&] {
    const EvaluationMode evaluating(model);
    return model.forward_rows(tokens.to(model.device()), ranges);
  }();
  const DType stats = model.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const auto vocab = size_t(model.config().vocab_size);
  std::vector<EndingScore> scores(static_cast<size_t>(rows));
  for (size_t r = 0; r < size_t(rows); ++r) {
    const int64_t count = ranges[r].count;
    const Tensor losses = Tensor::empty({count}, stats, model.device()), lse = Tensor::empty({count}, stats, model.device());
    const Tensor expected = Tensor::from(targets[r], {count}).to(model.device());
    scores[r].log_likelihood = -ops::cross_entropy_forward(logits[r], expected, losses, lse).sum;
    if (!check_greedy) continue;
    const std::vector<float> values = logits[r].to_vector<float>();
    for (size_t k = 0; k < size_t(count); ++k) {
      const float* row = values.data() + k * vocab;
      scores[r].greedy = scores[r].greedy && size_t(std::max_element(row, row + vocab) - row) == size_t(targets[r][k]);
    }
  }
  return scores;
}

// The choices' log-likelihoods of items[first, first + count), all in one forward pass.
std::vector<std::vector<double>> log_likelihoods_of(Transformer& model, const Tokenizer& tokenizer,
                                                    const std::vector<MultipleChoiceItem>& items, size_t first,
                                                    size_t count) {
  std::vector<EncodedChoice> choices;
  for (size_t k = first; k < first + count; ++k) {
    for (size_t i = 0; i < items[k].choices(); ++i) {
      choices.push_back(encoded_choice_of(tokenizer, items[k], items[k].context_of(i), items[k].ending_of(i),
                                          model.config().max_seq_len));
    }
  }
  const std::vector<EndingScore> scores = score_endings(model, choices, /*check_greedy=*/false);
  std::vector<std::vector<double>> out;
  size_t next = 0;
  for (size_t k = first; k < first + count; ++k) {
    std::vector<double>& ll = out.emplace_back();
    for (size_t i = 0; i < items[k].choices(); ++i) ll.push_back(scores[next++].log_likelihood);
  }
  return out;
}

}  // namespace

std::vector<double> ending_log_likelihoods(Transformer& model, const Tokenizer& tokenizer,
                                           const MultipleChoiceItem& item) {
  return log_likelihoods_of(model, tokenizer, {item}, 0, 1).front();
}

MultipleChoiceResult evaluate_multiple_choice(Transformer& model, const Tokenizer& tokenizer,
                                              const std::vector<MultipleChoiceItem>& items, int64_t batch_size,
                                              const std::function<void(int64_t done)>& progress) {
  HONE_CHECK(batch_size > 0, "batch_size must be positive, got {}", batch_size);
  MultipleChoiceResult r;
  for (size_t first = 0; first < items.size(); first += size_t(batch_size)) {
    if (progress) progress(int64_t(first));
    const size_t count = std::min(items.size() - first, size_t(batch_size));
    for (std::vector<double>& scored : log_likelihoods_of(model, tokenizer, items, first, count)) {
      const MultipleChoiceItem& item = items[r.log_likelihoods.size()];
      const std::vector<double>& ll = r.log_likelihoods.emplace_back(std::move(scored));
      r.chosen.push_back(std::max_element(ll.begin(), ll.end()) - ll.begin());
      if (item.true_endings > 0) {  // TruthfulQA's mc2: the true endings' share of the probability
        const double top = *std::max_element(ll.begin(), ll.end());
        double all = 0, true_mass = 0;
        for (size_t i = 0; i < ll.size(); ++i) {
          all += std::exp(ll[i] - top);
          if (int64_t(i) < item.true_endings) true_mass += std::exp(ll[i] - top);
        }
        r.scores.push_back(true_mass / all);
        r.scores_norm.push_back(true_mass / all);
        continue;
      }
      size_t best = 0, best_norm = 0;
      for (size_t i = 1; i < ll.size(); ++i) {
        if (ll[i] > ll[best]) best = i;
        if (ll[i] / characters(item.ending_of(i)) > ll[best_norm] / characters(item.ending_of(best_norm))) {
          best_norm = i;
        }
      }
      r.scores.push_back(int64_t(best) == item.label);
      r.scores_norm.push_back(int64_t(best_norm) == item.label);
    }
  }
  r.items = int64_t(items.size());
  r.accuracy = std::accumulate(r.scores.begin(), r.scores.end(), 0.0) / double(r.items);
  r.accuracy_norm = std::accumulate(r.scores_norm.begin(), r.scores_norm.end(), 0.0) / double(r.items);
  return r;
}

ContinuationResult evaluate_continuations(Transformer& model, const Tokenizer& tokenizer,
                                          const std::vector<MultipleChoiceItem>& items, int64_t batch_size,
                                          const std::function<void(int64_t done)>& progress) {
  HONE_CHECK(batch_size > 0, "batch_size must be positive, got {}", batch_size);
  ContinuationResult r;
  r.items = int64_t(items.size());
  double log_likelihood_sum = 0;
  int64_t greedy_count = 0;
  for (size_t first = 0; first < items.size(); first += size_t(batch_size)) {
    if (progress) progress(int64_t(first));
    std::vector<EncodedChoice> continuations;
    for (size_t k = first; k < std::min(items.size(), first + size_t(batch_size)); ++k) {
      continuations.push_back(encoded_choice_of(tokenizer, items[k], items[k].context, items[k].endings.at(0),
                                                model.config().max_seq_len));
    }
    for (const EndingScore& score : score_endings(model, continuations, /*check_greedy=*/true)) {
      r.log_likelihoods.push_back(score.log_likelihood);
      r.greedy.push_back(score.greedy);
      log_likelihood_sum += score.log_likelihood;
      greedy_count += score.greedy;
    }
  }
  r.accuracy = double(greedy_count) / double(std::max<int64_t>(r.items, 1));
  const double mean = log_likelihood_sum / double(std::max<int64_t>(r.items, 1));
  r.perplexity = std::exp(-mean);
  if (r.items >= 2) {
    double squares = 0;
    for (const double ll : r.log_likelihoods) squares += (ll - mean) * (ll - mean);
    r.perplexity_stderr = r.perplexity * std::sqrt(squares / double(r.items - 1) / double(r.items));
  }
  return r;
}

namespace {

// The harness's get_rolling_token_windows(tokens, prefix, max_len, context_len=1)
// through make_disjoint_window: (context, continuation) pairs predicting each
// token once.
std::vector<EncodedChoice> rolling_windows(const std::vector<int32_t>& tokens, int32_t prefix, int64_t max_len) {
  std::vector<EncodedChoice> windows;
  const size_t window = size_t(max_len);
  const auto at = [&](size_t i) { return tokens.begin() + std::ptrdiff_t(i); };
  const size_t first = std::min(window, tokens.size());
  if (first > 0) windows.push_back({.context = {prefix}, .ending = {at(0), at(first)}});
  for (size_t predicted = first; predicted < tokens.size();) {
    const size_t count = std::min(tokens.size() - predicted, window);
    // The window's max_len tokens before its last one, those before `predicted`: one for a whole window.
    const size_t context = window - count + 1;
    windows.push_back({.context = {at(predicted - context), at(predicted)}, .ending = {at(predicted), at(predicted + count)}});
    predicted += count;
  }
  return windows;
}

}  // namespace

DocumentResult evaluate_documents(Transformer& model, const Tokenizer& tokenizer, const std::vector<Document>& documents,
                                  int64_t batch_size, const std::function<void(int64_t done)>& progress) {
  HONE_CHECK(batch_size > 0, "batch_size must be positive, got {}", batch_size);
  const std::optional<int32_t> prefix = tokenizer.bos_id() ? tokenizer.bos_id() : tokenizer.eos_id();
  HONE_CHECK(prefix.has_value(), "the tokenizer has no BOS or end-of-text token to start a document after");
  DocumentResult r;
  // Every document's windows, and the document each belongs to.
  std::vector<EncodedChoice> windows;
  std::vector<size_t> owner;
  for (size_t d = 0; d < documents.size(); ++d) {
    const std::vector<int32_t> tokens = tokenizer.encode(documents[d].text);
    r.tokens.push_back(int64_t(tokens.size()));
    for (EncodedChoice& w : rolling_windows(tokens, *prefix, model.config().max_seq_len)) {
      windows.push_back(std::move(w));
      owner.push_back(d);
    }
  }
  r.log_likelihoods.assign(documents.size(), 0.0);
  for (size_t first = 0; first < windows.size(); first += size_t(batch_size)) {
    if (progress) progress(int64_t(owner[first]));
    const size_t count = std::min(windows.size() - first, size_t(batch_size));
    const std::vector<EncodedChoice> batch(windows.begin() + std::ptrdiff_t(first),
                                           windows.begin() + std::ptrdiff_t(first + count));
    const std::vector<EndingScore> scores = score_endings(model, batch, /*check_greedy=*/false);
    for (size_t k = 0; k < count; ++k) r.log_likelihoods[owner[first + k]] += scores[k].log_likelihood;
  }
  double log_likelihood = 0, words = 0, bytes = 0;
  for (size_t d = 0; d < documents.size(); ++d) {
    log_likelihood += r.log_likelihoods[d];
    words += double(documents[d].words);
    bytes += double(documents[d].bytes);
  }
  HONE_CHECK(bytes > 0, "{}: the documents hold no text to score", documents.empty() ? "" : documents.front().where);
  r.word_perplexity = std::exp(-log_likelihood / words);
  r.byte_perplexity = std::exp(-log_likelihood / bytes);
  r.bits_per_byte = -log_likelihood / bytes / std::log(2.0);
  return r;
}

std::vector<std::string> generate_until(Transformer& model, const Tokenizer& tokenizer,
                                        const std::vector<std::string>& prompts, const GenerateUntil& options,
                                        const std::function<void(int64_t done)>& progress) {
  const int64_t room = model.config().max_seq_len - options.max_new_tokens;
  HONE_CHECK(room > 0, "max_new_tokens {} leaves no room for a prompt in the model's max_seq_len {}",
             options.max_new_tokens, model.config().max_seq_len);
  HONE_CHECK(options.batch_size > 0, "batch_size must be positive, got {}", options.batch_size);
  GenerationOptions o;
  o.max_new_tokens = options.max_new_tokens;
  o.sampling.temperature = 0;
  o.vocab_size = std::min<int64_t>(tokenizer.vocab_size(), model.config().vocab_size);  // no padding rows
  if (tokenizer.eos_id()) o.stop_tokens.push_back(*tokenizer.eos_id());
  std::vector<std::string> completions;
  for (size_t first = 0; first < prompts.size(); first += size_t(options.batch_size)) {
    if (progress) progress(int64_t(first));
    const size_t count = std::min(prompts.size() - first, size_t(options.batch_size));
    std::vector<std::vector<int32_t>> encoded;
    for (size_t i = first; i < first + count; ++i) {
      std::vector<int32_t> tokens = tokenizer.encode(prompts[i]);
      HONE_CHECK(!tokens.empty(), "prompt {} is empty", i);
      if (int64_t(tokens.size()) > room) tokens.erase(tokens.begin(), tokens.end() - room);
      encoded.push_back(std::move(tokens));
    }
    o.finished = [&](size_t, const std::vector<int32_t>& completion) {
      const std::string text = tokenizer.decode(completion);
      return text_before_stop(text, options.until).size() < text.size();
    };
    for (std::vector<int32_t>& tokens : generate(model, encoded, o).completions) {
      if (!tokens.empty() && !o.stop_tokens.empty() && tokens.back() == o.stop_tokens.front()) tokens.pop_back();
      completions.push_back(text_before_stop(tokenizer.decode(tokens), options.until));
    }
  }
  return completions;
}

GenerativeResult evaluate_generative(Transformer& model, const Tokenizer& tokenizer,
                                     const std::vector<GenerativeItem>& items, const AnswerScorer& scorer,
                                     const GenerateUntil& options, const std::function<void(int64_t done)>& progress) {
  std::vector<std::string> prompts;
  for (const GenerativeItem& item : items) prompts.push_back(item.prompt);
  GenerateUntil until = options;
  until.until = scorer.scoring().until;
  GenerativeResult r;
  r.items = int64_t(items.size());
  r.completions = generate_until(model, tokenizer, prompts, until, progress);
  std::vector<int64_t> matched(scorer.scoring().filters.size(), 0);
  for (size_t i = 0; i < items.size(); ++i) {
    const AnswerScorer::Score& score = r.scores.emplace_back(scorer.score(r.completions[i], items[i].references));
    for (size_t f = 0; f < matched.size(); ++f) matched[f] += score.matches[f];
  }
  for (const int64_t m : matched) r.exact_match.push_back(double(m) / double(std::max<int64_t>(r.items, 1)));
  return r;
}

}  // namespace hone
