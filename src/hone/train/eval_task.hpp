#pragma once
// Evaluation tasks read from records (JSONL, JSON, Parquet, a folder or pattern
// of shards): multiple-choice items (a context, its endings and the right one)
// or questions answered in generated text (GSM8K), built from a record of a
// known layout as lm-evaluation-harness's task of that name builds its prompts,
// so that scores compare with its numbers.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hone/train/answer_match.hpp"

namespace hone {

// plain: ctx (or context), endings (or choices), label. The others are the
// columns of Hugging Face's datasets of those tasks (truthfulqa: truthful_qa's
// multiple_choice config); foundry is LLM Foundry's in-context-learning files
// (query, choices, gold). openbookqa, boolq (super_glue's) and siqa
// (social_i_qa) complete the commonsense set Llama's papers report; sciq is
// allenai/sciq. lambada
// (text: its last word continues the rest) and
// foundry_lm (LLM Foundry's language-modeling files: context, continuation) score
// one continuation; gsm8k (question, answer) and triviaqa (question, answer's
// aliases) are answered in generated text; wikitext
// (EleutherAI/wikitext_document_level: page) scores whole documents, the
// harness's loglikelihood_rolling.
enum class TaskLayout {
  plain, hellaswag, arc, piqa, mmlu, truthfulqa_mc1, truthfulqa_mc2, winogrande, openbookqa, boolq, siqa, sciq,
  foundry, lambada, foundry_lm, gsm8k, triviaqa, wikitext
};

// Choice i is an ending after the context; or, where `contexts` are given
// (Winogrande's: the sentence up to its blank, filled with each option), the
// one ending after context i.
struct MultipleChoiceItem {
  std::string context;
  std::vector<std::string> endings;
  int64_t label = 0;  // index of the right choice
  // TruthfulQA's mc2: the first this many endings are true, and the item scores
  // the share of probability they hold rather than right or wrong. 0 otherwise.
  int64_t true_endings = 0;
  std::vector<std::string> contexts;
  std::string where;    // "file:line" (or the record's place), for errors
  std::string subject;  // mmlu: the record's subject, which the harness scores apart

  size_t choices() const { return contexts.empty() ? endings.size() : contexts.size(); }
  const std::string& context_of(size_t i) const { return contexts.empty() ? context : contexts[i]; }
  const std::string& ending_of(size_t i) const { return contexts.empty() ? endings[i] : endings[0]; }
};

// A question whose answer the model writes: the prompt it continues, and the
// reference answers its text is compared with (one right is enough).
struct GenerativeItem {
  std::string prompt;
  std::vector<std::string> references;
};

// A document whose whole text is scored (its log-likelihood, token by token),
// with the words and bytes its perplexities are per: the harness's wikitext
// counts them in the page as stored, and scores the page as its detokenizer
// writes it.
struct Document {
  std::string text;
  int64_t words = 0, bytes = 0;
  std::string where;
};

struct EvalTask {
  TaskLayout layout = TaskLayout::plain;
  // Multiple-choice layouts; and lambada's and foundry_lm's, an item whose one ending is the continuation.
  std::vector<MultipleChoiceItem> items;
  std::vector<GenerativeItem> generative_items;  // gsm8k, triviaqa
  std::vector<Document> documents;               // wikitext
};

// The layout's name, as task.layout takes it ("auto" besides).
const char* layout_name(TaskLayout layout);
// Whether lm-evaluation-harness reports acc_norm for the layout's task (HellaSwag, ARC, PIQA, OpenBookQA, SciQ;
// plain, Foundry's).
bool reports_accuracy_norm(TaskLayout layout);
// Whether the layout's items are scored by their one continuation (lambada, foundry_lm).
bool scores_continuation(TaskLayout layout);
// Whether the layout's items are answered in generated text (gsm8k, triviaqa).
bool is_generative(TaskLayout layout);
// Whether the layout's items are documents scored whole (wikitext).
bool scores_documents(TaskLayout layout);
// How the harness's task of a generative layout stops and scores its answers
// (gsm8k: its task version 3, triviaqa: version 2).
AnswerScoring answer_scoring(TaskLayout layout);

// Answered examples before each question, as lm-evaluation-harness's samplers
// pick them from `path` (the task's training or dev split) with num_fewshot:
// mmlu, the first `count` records of the item's subject (its first_n sampler);
// the other layouts, Random(seed).sample(records, count) drawn for each item in
// turn (its default sampler, seeded by --fewshot_random_seed, 1234), one more
// when `path` is the task's own file and the item itself then left out. Each
// example is its context, a space, its right ending and a blank line.
struct FewShot {
  std::string path;
  int64_t count = 0;
  uint64_t seed = 1234;
};

// Reads every record of `path` in `layout`, or, with "auto", in the layout the
// first record's columns show. Errors name the record and the column.
EvalTask read_eval_task(const std::string& path, std::string_view layout = "auto",
                                        const FewShot& shots = {});

// A wikitext page as the harness's wikitext_detokenizer writes it (its
// replacements and regular expressions, in its order).
std::string wikitext_detokenized(std::string_view page);
// len(re.split(r"\s+", text)): the words the harness's wikitext counts (a
// leading or trailing run of white space counts one more), Python's white space.
int64_t python_split_words(std::string_view text);

// The harness's MMLU group of a subject (its _generate_configs.py): stem,
// humanities, social_sciences or other; empty for a subject it does not have.
std::string_view mmlu_category(std::string_view subject);

// HellaSwag's text as lm-evaluation-harness cleans it: trimmed, " [title]" read
// as ". ", WikiHow's other [bracketed] markers dropped, double spaces halved.
std::string clean_hellaswag_text(std::string_view text);

}  // namespace hone
