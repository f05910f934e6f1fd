#pragma once
// Generated answers scored as lm-evaluation-harness scores its generate_until
// tasks: a regex filter takes the answer out of the text (its RegexFilter, then
// take_first), and exact match compares it with the reference once the
// patterns it ignores are removed (Hugging Face evaluate's exact_match, which
// the harness uses).
#include <string>
#include <string_view>
#include <vector>

#include "hone/train/python_regex.hpp"

namespace hone {

// The filter's answer in `response`: the match at `group_select` (negative counts
// from the last), its first non-empty group, stripped; `fallback` when nothing matches.
std::string extract_answer(const PythonRegex& filter, std::string_view response, int group_select = 0,
                           std::string_view fallback = "[invalid]");

// Whether prediction and reference are equal once every `ignore` pattern is
// removed from both (in order), and, with `ignore_case`, lower-cased.
bool exact_match(std::string prediction, std::string reference, const std::vector<const PythonRegex*>& ignore,
                 bool ignore_case);

// GSM8K as the harness's gsm8k task (version 3) scores an answer: strict-match
// takes the number after "#### ", flexible-extract the last number in the text;
// each compared with the reference's number after "#### ", commas, dollar signs
// and a final period ignored, case ignored.
struct Gsm8kScore {
  std::string strict_answer, flexible_answer;  // as extracted ("[invalid]": none)
  bool strict_match = false, flexible_match = false;
};
Gsm8kScore score_gsm8k(std::string_view completion, std::string_view reference);

}  // namespace hone
