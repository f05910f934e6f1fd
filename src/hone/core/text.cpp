#include "hone/core/text.hpp"

#include <fmt/format.h>

#include <cctype>
#include <utility>

#include "hone/core/error.hpp"

namespace hone {

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return fmt::format("{:.{}f} {}", bytes, u == 0 ? 0 : 2, units[u]);
}

std::string format_count(int64_t n) {
  if (n >= 1'000'000'000) return fmt::format("{:.2f}B", double(n) / 1e9);
  if (n >= 1'000'000) return fmt::format("{:.1f}M", double(n) / 1e6);
  return std::to_string(n);
}

std::string plural(int64_t n, std::string_view word, std::string_view plural_form) {
  if (n == 1) return std::string(word);
  return plural_form.empty() ? std::string(word) + "s" : std::string(plural_form);
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty() || s.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  out.append(s, pos);
  s = std::move(out);
}

namespace {

// The UTF-8 bytes of the white space Python's str.isspace() knows beyond
// ASCII's: U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F,
// U+205F and U+3000 (NO-BREAK SPACE and IDEOGRAPHIC SPACE among them).
bool is_unicode_space(std::string_view c) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(c[i]); };
  if (c.size() == 2) return byte(0) == 0xC2 && (byte(1) == 0x85 || byte(1) == 0xA0);
  if (c.size() != 3) return false;
  if (byte(0) == 0xE1) return byte(1) == 0x9A && byte(2) == 0x80;
  if (byte(0) == 0xE3) return byte(1) == 0x80 && byte(2) == 0x80;
  if (byte(0) != 0xE2) return false;
  if (byte(1) == 0x80) return byte(2) <= 0x8A || byte(2) == 0xA8 || byte(2) == 0xA9 || byte(2) == 0xAF;
  return byte(1) == 0x81 && byte(2) == 0x9F;
}

// The length of the white-space character `s` starts with (0: none).
size_t leading_space(std::string_view s) {
  if (s.empty()) return 0;
  const auto c = static_cast<unsigned char>(s.front());
  if (c < 0x80) return std::isspace(c) || (c >= 0x1c && c <= 0x1f) ? 1 : 0;
  const size_t length = c >= 0xE0 ? 3 : 2;
  return s.size() >= length && is_unicode_space(s.substr(0, length)) ? length : 0;
}

// The length of the white-space character `s` ends with (0: none).
size_t trailing_space(std::string_view s) {
  size_t start = s.size();
  while (start > 0 && s.size() - start < 3 && (static_cast<unsigned char>(s[start - 1]) & 0xC0) == 0x80) --start;
  if (start == 0) return 0;
  --start;  // the character's first byte
  return leading_space(s.substr(start)) == s.size() - start ? s.size() - start : 0;
}

}  // namespace

std::string_view python_lstrip(std::string_view s) {
  while (const size_t n = leading_space(s)) s.remove_prefix(n);
  return s;
}

std::string_view python_strip(std::string_view s) {
  s = python_lstrip(s);
  while (const size_t n = trailing_space(s)) s.remove_suffix(n);
  return s;
}

std::string csv_field(std::string_view s) {
  if (s.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(s);
  std::string quoted(s);
  replace_all(quoted, "\"", "\"\"");
  return "\"" + quoted + "\"";
}

std::vector<std::string> csv_fields(std::string_view line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      fields.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

}  // namespace hone
