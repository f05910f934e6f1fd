#pragma once
// Evaluation: mean loss and perplexity over batches, and multiple-choice tasks
// (a context and several endings, one right; multiple_choice.hpp) scored by the
// log-likelihood of each ending, as lm-evaluation-harness scores them.
#include <functional>
#include <string>
#include <vector>

#include "hone/data/batch.hpp"
#include "hone/data/tokenizers/tokenizer.hpp"
#include "hone/model/transformer.hpp"
#include "hone/train/multiple_choice.hpp"

namespace hone {

struct LossEvaluation {
  double loss = 0;  // mean over unmasked target tokens
  int64_t tokens = 0;
  double perplexity() const;
};

// Mean loss over the first `max_batches` batches of `source` (restored to its
// start first). Dropout is off while it runs.
LossEvaluation evaluate_loss(Transformer& model, data::BatchSource& source, int64_t max_batches);

struct MultipleChoiceResult {
  int64_t items = 0;
  // argmax of Σ log p(ending | context); for items with true_endings (TruthfulQA's mc2), the true endings' share
  // of the probability, as accuracy_norm too.
  double accuracy = 0;
  double accuracy_norm = 0;  // argmax of that sum divided by the ending's length in characters (acc_norm)
};

// The log-likelihood of each ending after its context (the context cut from the
// left when the pair exceeds the model's max_seq_len).
std::vector<double> ending_log_likelihoods(Transformer& model, const Tokenizer& tokenizer,
                                           const MultipleChoiceItem& item);
// `progress`, when given, hears how many items are done after each.
MultipleChoiceResult evaluate_multiple_choice(Transformer& model, const Tokenizer& tokenizer,
                                              const std::vector<MultipleChoiceItem>& items,
                                              const std::function<void(int64_t done)>& progress = {});

}  // namespace hone
