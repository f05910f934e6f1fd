#pragma once
// UTF-8 helpers for the tokenizers.
#include <cstdint>
#include <string>
#include <string_view>

namespace hone::utf8 {

// `text` itself when it is valid UTF-8; otherwise a copy in `storage` where each
// maximal invalid subsequence is replaced by U+FFFD, as the WHATWG decoder (a
// browser's or Node's TextDecoder) and Python's errors="replace" do.
std::string_view sanitize(std::string_view text, std::string& storage);

bool valid(std::string_view text);
// Length in bytes of the valid UTF-8 that `text` starts with (text.size(): all of it).
size_t valid_prefix(std::string_view text);

// Length in bytes of the character whose first byte is `lead` (1 for a byte that
// cannot start one). Only meaningful on valid UTF-8.
inline int char_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;
}

// Decodes the character at text[i] (valid UTF-8) and advances i past it.
inline uint32_t next(std::string_view text, size_t& i) {
  const auto b = [&](size_t k) { return uint32_t(static_cast<unsigned char>(text[k])); };
  const uint32_t lead = b(i);
  const int n = char_length(static_cast<unsigned char>(lead));
  uint32_t cp = n == 1 ? lead : n == 2 ? lead & 0x1F : n == 3 ? lead & 0x0F : lead & 0x07;
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (b(i + size_t(k)) & 0x3F);
  i += size_t(n);
  return cp;
}

void append(std::string& out, uint32_t cp);

// Unicode White_Space (what Rust's char::is_whitespace and regex \s match).
inline bool is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

}  // namespace hone::utf8
