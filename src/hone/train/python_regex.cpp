#define PCRE2_CODE_UNIT_WIDTH 8
#include "hone/train/python_regex.hpp"

#include <pcre2.h>

#include <memory>

#include "hone/core/error.hpp"

namespace hone {

PythonRegex::PythonRegex(std::string_view pattern, std::string_view where) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), 0, &error, &offset, nullptr);
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

}  // namespace hone
