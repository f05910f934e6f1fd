#include "hone/train/answer_match.hpp"

#include <cctype>

#include "hone/core/error.hpp"

namespace hone {

namespace {

std::string_view stripped(std::string_view s) {
  // Python's str.strip() on ASCII: whitespace and the separators \x1c-\x1f.
  const auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) || (c >= 0x1c && c <= 0x1f); };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
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

bool exact_match(std::string prediction, std::string reference, const std::vector<const PythonRegex*>& ignore,
                 bool ignore_case) {
  for (const PythonRegex* pattern : ignore) {
    prediction = pattern->remove_all(prediction);
    reference = pattern->remove_all(reference);
  }
  if (ignore_case) {
    for (std::string* s : {&prediction, &reference}) {
      for (char& c : *s) c = char(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  return prediction == reference;
}

Gsm8kScore score_gsm8k(std::string_view completion, std::string_view reference) {
  // The patterns of the harness's gsm8k.yaml, as Python reads them.
  static const PythonRegex strict(R"(#### (\-?[0-9\.\,]+))", "gsm8k strict-match");
  static const PythonRegex flexible(R"((-?[$0-9.,]{2,})|(-?[0-9]+))", "gsm8k flexible-extract");
  static const PythonRegex commas(",", "gsm8k"), dollars(R"(\$)", "gsm8k"), reasoning("(?s).*#### ", "gsm8k"),
      final_period(R"(\.$)", "gsm8k");
  const std::vector<const PythonRegex*> ignore = {&commas, &dollars, &reasoning, &final_period};
  Gsm8kScore score;
  score.strict_answer = extract_answer(strict, completion);
  score.flexible_answer = extract_answer(flexible, completion, -1);
  score.strict_match = exact_match(score.strict_answer, std::string(reference), ignore, true);
  score.flexible_match = exact_match(score.flexible_answer, std::string(reference), ignore, true);
  return score;
}

}  // namespace hone
