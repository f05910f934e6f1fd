#include "hone/core/json_text.hpp"

#include <fmt/format.h>

namespace hone {

void check_json_text(std::string_view text, std::string_view where) {
  constexpr int kMaxDepth = 512;
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    HONE_CHECK(c != '\0', "{}: byte {} is NUL, which JSON text cannot hold (binary data?)", where, i);
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character, a quote among them
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      HONE_CHECK(++depth <= kMaxDepth, "{}: byte {}: arrays and objects nested more than {} deep", where, i, kMaxDepth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

std::string json_error_text(const nlohmann::json::exception& e, size_t first_byte) {
  // "[json.exception.parse_error.101] parse error at line 3, column 2: ...": the part after "] ", and the byte.
  std::string_view what = e.what();
  if (const size_t p = what.find("] "); p != std::string_view::npos) what.remove_prefix(p + 2);
  const auto* syntax = dynamic_cast<const nlohmann::json::parse_error*>(&e);
  return syntax ? fmt::format("byte {}: {}", first_byte + syntax->byte, what) : std::string(what);
}

}  // namespace hone
