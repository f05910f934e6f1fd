#pragma once
// Numbers as a person reads them in banners, progress lines and reports; text helpers.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hone {

// "512 B", "1.50 KiB", "2.00 GiB": binary units, two decimals above bytes.
std::string format_bytes(double bytes);
// "8.03B", "124.4M", "65": a count of parameters.
std::string format_count(int64_t n);
// `word` or its plural after a count of n ("1 prompt", "2 prompts");
// `plural_form` where adding an s will not do.
std::string plural(int64_t n, std::string_view word, std::string_view plural_form = "");
// Every `from` in `s` replaced by `to`, left to right without overlaps (Python's str.replace).
void replace_all(std::string& s, std::string_view from, std::string_view to);
// Python's str.lstrip() and str.strip() (Jinja's trim) on UTF-8 text: the
// characters str.isspace() takes removed from the start, or both ends: ASCII
// white space, the separators \x1c-\x1f, and Unicode's spaces (U+00A0, U+3000, ...).
std::string_view python_lstrip(std::string_view s);
std::string_view python_strip(std::string_view s);
// A CSV field as RFC 4180 (and Python's csv module) write it: quoted, with its
// quotes doubled, where it holds a comma, a quote or a line break.
std::string csv_field(std::string_view s);
// The fields of one CSV line, quoted ones unquoted.
std::vector<std::string> csv_fields(std::string_view line);

}  // namespace hone
