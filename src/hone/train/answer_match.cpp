#include "hone/train/answer_match.hpp"

#include <algorithm>
#include <cctype>

#include "hone/core/error.hpp"

namespace hone {

namespace {

// Python's str.isspace() on ASCII: whitespace and the separators \x1c-\x1f.
bool python_space(char c) { return std::isspace(static_cast<unsigned char>(c)) || (c >= 0x1c && c <= 0x1f); }

std::string_view stripped_left(std::string_view s) {
  while (!s.empty() && python_space(s.front())) s.remove_prefix(1);
  return s;
}

std::string_view stripped(std::string_view s) {
  s = stripped_left(s);
  while (!s.empty() && python_space(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

std::string extract_answer(const PythonRegex& filter, std::string_view response, int group_select,
                           std::string_view fallback) {
  const auto matches = filter.find_all(response);
  const int count = int(matches.size());
  const int at = group_select < 0 ? count + group_select : group_select;
  if (count == 0) return std::string(fallback);
  HONE_CHECK(at >= 0 && at < count, "answer filter: group_select {} of {} matches", group_select, count);
  for (const std::string& group : matches[size_t(at)]) {
    if (!group.empty()) return std::string(stripped(group));
  }
  return std::string(fallback);
}

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
    if (filter.strip_leading_whitespace) answer = std::string(stripped_left(answer));
    const bool match = std::any_of(references.begin(), references.end(),
                                   [&](const std::string& reference) { return exact_match(answer, reference); });
    score.answers.push_back(std::move(answer));
    score.matches.push_back(match);
  }
  return score;
}

}  // namespace hone
