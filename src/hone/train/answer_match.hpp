#pragma once
// Generated answers scored as lm-evaluation-harness scores its generate_until
// tasks: each filter of the task takes an answer out of the completion (its
// RegexFilter or remove_whitespace, then take_first), and exact match compares
// the answer with the references once the patterns the task ignores are removed
// (Hugging Face evaluate's exact_match, which the harness uses; with several
// references, as TriviaQA's aliases, one equal is enough).
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hone/train/python_regex.hpp"

namespace hone {

// A generate_until task's scoring, as its task file states it.
struct AnswerScoring {
  struct Filter {
    std::string key;    // names the result: exact_match_{key}, or exact_match when empty
    std::string regex;  // the answer: this pattern's match (Python syntax), or, empty, the whole completion
    int group_select = 0;  // which match (negative counts from the last)
    bool strip_leading_whitespace = false;  // remove_whitespace
  };
  std::vector<std::string> until;  // stop strings
  std::vector<Filter> filters;
  std::vector<std::string> ignore;  // regexes_to_ignore, removed in order
  bool ignore_case = false;
  bool ignore_punctuation = false;  // Python's string.punctuation removed
};

// A scoring with its patterns compiled.
class AnswerScorer {
 public:
  explicit AnswerScorer(AnswerScoring scoring);

  // Per filter: the answer it took, and whether it matches a reference.
  struct Score {
    std::vector<std::string> answers;
    std::vector<bool> matches;
  };
  Score score(std::string_view completion, const std::vector<std::string>& references) const;
  // Whether `prediction` equals `reference` under the scoring's normalisation.
  bool exact_match(std::string prediction, std::string reference) const;

  const AnswerScoring& scoring() const { return scoring_; }

 private:
  AnswerScoring scoring_;
  std::vector<std::unique_ptr<PythonRegex>> filters_;  // null: the whole completion
  std::vector<std::unique_ptr<PythonRegex>> ignore_;
};

}  // namespace hone
