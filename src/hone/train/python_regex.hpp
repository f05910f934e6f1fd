#pragma once
// A regular expression as Python's `re` applies it, for the patterns that
// evaluation tasks write in Python (lm-evaluation-harness's answer filters and
// the patterns its exact_match ignores): compiled with PCRE2, whose syntax and
// matching agree with `re` on them (groups, classes, (?s), $ before a final
// newline). Text is matched as bytes, so classes are of ASCII characters;
// with Text::unicode as UTF-8 characters, \s and \w Unicode's (as `re` matches
// a str; Python's \s also takes U+001C-U+001F, which this does not).
#include <string>
#include <string_view>
#include <vector>

struct pcre2_real_code_8;

namespace hone {

class PythonRegex {
 public:
  enum class Text { bytes, unicode };
  // `where` names the pattern's source for the error an invalid one raises.
  PythonRegex(std::string_view pattern, std::string_view where, Text text = Text::bytes);
  ~PythonRegex();
  PythonRegex(const PythonRegex&) = delete;
  PythonRegex& operator=(const PythonRegex&) = delete;

  // re.findall: each non-overlapping match, left to right, as its groups ("" for
  // a group that took no part), or as the whole match when it has no groups.
  std::vector<std::vector<std::string>> find_all(std::string_view text) const;
  // re.sub(pattern, "", text).
  std::string remove_all(std::string_view text) const;
  // re.sub(pattern, replacement, text), the replacement's \1 ... \9 its groups.
  std::string replace_all(std::string_view text, std::string_view replacement) const;

 private:
  // Calls `match(begin, end)` for each non-overlapping match's span; after an
  // empty match the search goes on one byte further.
  template <typename OnMatch>
  void for_each_match(std::string_view text, OnMatch&& match) const;

  pcre2_real_code_8* code_ = nullptr;
  int groups_ = 0;
  bool unicode_ = false;
};

}  // namespace hone
