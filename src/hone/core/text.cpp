#include "hone/core/text.hpp"

#include <fmt/format.h>

#include <cctype>
#include <utility>

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
bool python_space(char c) { return std::isspace(static_cast<unsigned char>(c)) || (c >= 0x1c && c <= 0x1f); }
}  // namespace

std::string_view python_lstrip(std::string_view s) {
  while (!s.empty() && python_space(s.front())) s.remove_prefix(1);
  return s;
}

std::string_view python_strip(std::string_view s) {
  s = python_lstrip(s);
  while (!s.empty() && python_space(s.back())) s.remove_suffix(1);
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
