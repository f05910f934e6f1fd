#include "hone/train/answer_match.hpp"

#include <algorithm>
#include <cctype>

#include "hone/core/error.hpp"
#include "hone/core/text.hpp"

namespace hone {

namespace {

// The harness's RegexFilter then take_first: the match at `group_select`
// (negative counts from the last), its first non-empty group, stripped;
// "[invalid]" when nothing matches.
std::string extract_answer(const PythonRegex& filter, std::string_view response, int group_select) {
  constexpr std::string_view kFallback = "[invalid]";
  const auto matches = filter.find_all(response);
  const int count = int(matches.size());
  const int at = group_select < 0 ? count + group_select : group_select;
  if (count == 0) return std::string(kFallback);
  HONE_CHECK(at >= 0 && at < count, "answer filter: group_select {} of {} matches", group_select, count);
  for (const std::string& group : matches[size_t(at)]) {
    if (!group.empty()) return std::string(python_strip(group));
  }
  return std::string(kFallback);
}

}  // namespace

AnswerScorer::AnswerScorer(AnswerScoring scoring) : scoring_(std::move(scoring)) {
  for (const AnswerScoring::Filter& f : scoring_.filters) {
    filters_.push_back(f.regex.empty() ? nullptr : std::make_unique<PythonRegex>(f.regex, "answer filter"));
  }
  for (const std::string& pattern : scoring_.ignore) {
    ignore_.push_back(std::make_unique<PythonRegex>(pattern, "regexes_to_ignore"));
  }
}

bool AnswerScorer::exact_match(std::string prediction, std::string reference) const {
  for (const auto& pattern : ignore_) {
    prediction = pattern->remove_all(prediction);
    reference = pattern->remove_all(reference);
  }
  for (std::string* s : {&prediction, &reference}) {
    if (scoring_.ignore_case) {
      for (char& c : *s) c = char(std::tolower(static_cast<unsigned char>(c)));
    }
    if (scoring_.ignore_punctuation) {
      std::erase_if(*s, [](char c) { return std::ispunct(static_cast<unsigned char>(c)) != 0; });
    }
  }
  return prediction == reference;
}

AnswerScorer::Score AnswerScorer::score(std::string_view completion, const std::vector<std::string>& references) const {
  Score score;
  for (size_t f = 0; f < filters_.size(); ++f) {
    const AnswerScoring::Filter& filter = scoring_.filters[f];
    std::string answer = filters_[f] ? extract_answer(*filters_[f], completion, filter.group_select)
                                     : std::string(completion);
    if (filter.strip_leading_whitespace) answer = std::string(python_lstrip(answer));
    const bool match = std::any_of(references.begin(), references.end(),
                                   [&](const std::string& reference) { return exact_match(answer, reference); });
    score.answers.push_back(std::move(answer));
    score.matches.push_back(match);
  }
  return score;
}

}  // namespace hone
