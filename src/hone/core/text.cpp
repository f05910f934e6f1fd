#include "hone/core/text.hpp"

#include <fmt/format.h>

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

}  // namespace hone
