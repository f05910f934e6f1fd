#define PCRE2_CODE_UNIT_WIDTH 8
#include "hone/train/python_regex.hpp"

#include <pcre2.h>

#include <memory>

#include "hone/core/error.hpp"

namespace hone {

PythonRegex::PythonRegex(std::string_view pattern, std::string_view where, Text text)
    : unicode_(text == Text::unicode) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // Unicode text: invalid UTF-8 in it never matches a character, rather than failing the match.
  const uint32_t options = unicode_ ? PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF : 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset,
                        nullptr);
  if (!code_) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    fail("{}: invalid regular expression {:?}: {} (at offset {})", where, std::string(pattern),
         reinterpret_cast<const char*>(message), size_t(offset));
  }
  uint32_t count = 0;
  pcre2_pattern_info(code_, PCRE2_INFO_CAPTURECOUNT, &count);
  groups_ = int(count);
}

PythonRegex::~PythonRegex() { pcre2_code_free(code_); }

template <typename OnMatch>
void PythonRegex::for_each_match(std::string_view text, OnMatch&& on_match) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(code_, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  for (size_t start = 0; start <= text.size();) {
    const int rc = pcre2_match(code_, subject, text.size(), start, 0, data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    HONE_CHECK(rc > 0, "regular expression match failed (PCRE2 error {})", rc);
    const PCRE2_SIZE* span = pcre2_get_ovector_pointer(data.get());
    on_match(span);
    start = span[1] > span[0] ? span[1] : span[1] + 1;
    // After an empty match, on to the next character (not into one).
    while (unicode_ && span[1] == span[0] && start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80)
      ++start;
  }
}

std::vector<std::vector<std::string>> PythonRegex::find_all(std::string_view text) const {
  std::vector<std::vector<std::string>> matches;
  for_each_match(text, [&](const PCRE2_SIZE* span) {
    std::vector<std::string>& groups = matches.emplace_back();
    for (int g = groups_ == 0 ? 0 : 1; g <= groups_; ++g) {
      const PCRE2_SIZE begin = span[2 * g], end = span[2 * g + 1];
      groups.emplace_back(begin == PCRE2_UNSET ? std::string_view() : text.substr(begin, end - begin));
    }
  });
  return matches;
}

std::string PythonRegex::remove_all(std::string_view text) const {
  std::string kept;
  size_t from = 0;
  for_each_match(text, [&](const PCRE2_SIZE* span) {
    kept.append(text.substr(from, span[0] - from));
    from = span[1];
  });
  return kept.append(text.substr(from));
}

std::string PythonRegex::replace_all(std::string_view text, std::string_view replacement) const {
  std::string out;
  size_t from = 0;
  for_each_match(text, [&](const PCRE2_SIZE* span) {
    out.append(text.substr(from, span[0] - from));
    for (size_t i = 0; i < replacement.size(); ++i) {
      const int group = replacement[i] == '\\' && i + 1 < replacement.size() ? replacement[i + 1] - '0' : -1;
      if (group < 1 || group > 9) {
        out.push_back(replacement[i]);
        continue;
      }
      HONE_CHECK(group <= groups_, "replacement {:?} names group {} of a pattern with {}", std::string(replacement),
                 group, groups_);
      if (span[2 * group] != PCRE2_UNSET) out.append(text.substr(span[2 * group], span[2 * group + 1] - span[2 * group]));
      ++i;
    }
    from = span[1];
  });
  return out.append(text.substr(from));
}

}  // namespace hone
