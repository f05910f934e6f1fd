#include "hone/data/tokenizers/utf8.hpp"

#include <cstring>

namespace hone::utf8 {

size_t valid_prefix(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    // ASCII runs are the common case: eight bytes at a time.
    if (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, p + i, 8);
      if ((word & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + size_t(need) >= n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (int k = 2; k <= need; ++k)
      if (p[i + size_t(k)] < 0x80 || p[i + size_t(k)] > 0xBF) return i;
    i += size_t(need) + 1;
  }
  return n;
}

bool valid(std::string_view text) { return valid_prefix(text) == text.size(); }

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

std::string_view sanitize(std::string_view text, std::string& storage) {
  size_t start = valid_prefix(text);
  if (start == text.size()) return text;
  storage.assign(text.data(), start);
  // The WHATWG "UTF-8 decode" algorithm from the first invalid byte on: a byte
  // that does not continue the pending sequence ends it with one U+FFFD and is
  // then looked at again as a possible lead byte.
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  uint32_t cp = 0;
  int needed = 0, seen = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  size_t i = start;
  while (i < n) {
    const unsigned char c = p[i];
    if (needed == 0) {
      ++i;
      if (c < 0x80) {
        storage += char(c);
      } else if (c >= 0xC2 && c <= 0xDF) {
        needed = 1;
        cp = c & 0x1F;
      } else if (c >= 0xE0 && c <= 0xEF) {
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
        needed = 2;
        cp = c & 0x0F;
      } else if (c >= 0xF0 && c <= 0xF4) {
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
        needed = 3;
        cp = c & 0x07;
      } else {
        append(storage, 0xFFFD);
      }
      continue;
    }
    if (c < lo || c > hi) {
      cp = 0;
      needed = seen = 0;
      lo = 0x80;
      hi = 0xBF;
      append(storage, 0xFFFD);
      continue;  // c is looked at again
    }
    ++i;
    lo = 0x80;
    hi = 0xBF;
    cp = (cp << 6) | (c & 0x3F);
    if (++seen == needed) {
      append(storage, cp);
      cp = 0;
      needed = seen = 0;
    }
  }
  if (needed != 0) append(storage, 0xFFFD);
  return storage;
}

}  // namespace hone::utf8
