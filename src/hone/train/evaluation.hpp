#pragma once
#include <optional>
// Evaluation: mean loss and perplexity over batches; multiple-choice tasks (a
// context and several endings, one right; eval_task.hpp) scored by the
// log-likelihood of each ending, and questions answered in greedily generated
// text (GSM8K), as lm-evaluation-harness scores them.
#include <functional>
#include <string>
#include <vector>

#include "hone/data/batch.hpp"
#include "hone/data/tokenizers/tokenizer.hpp"
#include "hone/model/transformer.hpp"
#include "hone/train/answer_match.hpp"
#include "hone/train/eval_task.hpp"

namespace hone {

struct LossEvaluation {
  double loss = 0;  // mean over unmasked target tokens
  int64_t tokens = 0;
  double perplexity() const;
};

// Mean loss over one pass of `source` (rewound first; each sample once), or
// its first `max_batches` batches. Dropout is off while it runs. `progress`
// (may be empty) is told the batches done before each batch; it may throw to
// cut the pass short.
LossEvaluation evaluate_loss(Transformer& model, data::BatchSource& source, int64_t max_batches,
                             const std::function<void(int64_t done)>& progress = {});

struct MultipleChoiceResult {
  int64_t items = 0;
  // Per item: 1 where the argmax of Σ log p(ending | context) is the label, else
  // 0; for items with true_endings (TruthfulQA's mc2), the true endings' share
  // of the probability, as in scores_norm too. Their means: accuracy.
  std::vector<double> scores;
  // The same with the sums divided by the endings' lengths in characters (acc_norm).
  std::vector<double> scores_norm;
  double accuracy = 0, accuracy_norm = 0;
  // Per item: each choice's log-likelihood, and the choice with the largest.
  std::vector<std::vector<double>> log_likelihoods;
  std::vector<int64_t> chosen;
};

// The log-likelihood of each ending after its context (the context cut from the
// left when the pair exceeds the model's max_seq_len).
std::vector<double> ending_log_likelihoods(Transformer& model, const Tokenizer& tokenizer,
                                           const MultipleChoiceItem& item);
// `batch_size` items are scored in one forward pass (their choices' rows
// together); `progress`, when given, hears how many items are done before each.
MultipleChoiceResult evaluate_multiple_choice(Transformer& model, const Tokenizer& tokenizer,
                                              const std::vector<MultipleChoiceItem>& items, int64_t batch_size = 1,
                                              const std::function<void(int64_t done)>& progress = {});

// Tasks that score one continuation per item (LAMBADA; the items' first ending,
// after its context), as the harness scores loglikelihood tasks: `accuracy`,
// the share of items whose every continuation token is the model's most likely
// (its acc, is_greedy; LLM Foundry's language-modeling accuracy), and
// `perplexity`, exp of minus the mean log-likelihood per item (its perplexity).
struct ContinuationResult {
  int64_t items = 0;
  double accuracy = 0, perplexity = 0;
  // The perplexity's standard error by the delta method, perplexity · sd(log-likelihoods)/√n (the harness
  // bootstraps it: the same to first order); null below two items.
  std::optional<double> perplexity_stderr;
  std::vector<double> log_likelihoods;  // per item
  std::vector<bool> greedy;             // per item
};
// `batch_size` and `progress` as for evaluate_multiple_choice.
ContinuationResult evaluate_continuations(Transformer& model, const Tokenizer& tokenizer,
                                          const std::vector<MultipleChoiceItem>& items, int64_t batch_size = 1,
                                          const std::function<void(int64_t done)>& progress = {});

// Documents scored whole, as the harness's loglikelihood_rolling scores them:
// each document's tokens (no BOS) in windows of max_seq_len predicted tokens,
// the first after BOS (else the end-of-text token), each later one after the
// token before it, and a last shorter one after as many tokens before it as
// fill max_seq_len (get_rolling_token_windows with context_len 1, made
// disjoint); `batch_size` windows a forward pass.
struct DocumentResult {
  std::vector<double> log_likelihoods;  // per document, the sum over its tokens
  std::vector<int64_t> tokens;          // per document
  // Over all documents, per word and per byte (the harness's word_perplexity,
  // byte_perplexity and bits_per_byte: exp(−Σ ll / Σ words), ...).
  double word_perplexity = 0, byte_perplexity = 0, bits_per_byte = 0;
};
DocumentResult evaluate_documents(Transformer& model, const Tokenizer& tokenizer, const std::vector<Document>& documents,
                                  int64_t batch_size = 1, const std::function<void(int64_t done)>& progress = {});

// The harness's generate_until: greedy completions of each prompt (its tokens
// cut from the left to leave max_new_tokens of max_seq_len), `batch_size` at a
// time, each ending at the end-of-text token, after max_new_tokens, or once its
// text holds one of `until`, and cut before the first of them.
struct GenerateUntil {
  std::vector<std::string> until;
  int64_t max_new_tokens = 256;
  int64_t batch_size = 4;
};
std::vector<std::string> generate_until(Transformer& model, const Tokenizer& tokenizer,
                                        const std::vector<std::string>& prompts, const GenerateUntil& options,
                                        const std::function<void(int64_t done)>& progress = {});

struct GenerativeResult {
  int64_t items = 0;
  std::vector<std::string> completions;
  std::vector<AnswerScorer::Score> scores;  // per item
  std::vector<double> exact_match;          // per filter: the share of items whose answer matched
};

// A generate_until task as the harness runs it: generate_until with the
// scoring's stop strings (options.until is set so), each completion scored by
// `scorer`.
GenerativeResult evaluate_generative(Transformer& model, const Tokenizer& tokenizer,
                                     const std::vector<GenerativeItem>& items, const AnswerScorer& scorer,
                                     const GenerateUntil& options,
                                     const std::function<void(int64_t done)>& progress = {});

}  // namespace hone
