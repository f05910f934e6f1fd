#include "hone/io/json_error.hpp"

#include <fmt/format.h>

#include <string_view>

namespace hone {

std::string json_error_text(const nlohmann::json::exception& e, size_t first_byte) {
  // "[json.exception.parse_error.101] parse error at line 3, column 2: ...": the part after "] ", and the byte.
  std::string_view what = e.what();
  if (const size_t p = what.find("] "); p != std::string_view::npos) what.remove_prefix(p + 2);
  const auto* syntax = dynamic_cast<const nlohmann::json::parse_error*>(&e);
  return syntax ? fmt::format("byte {}: {}", first_byte + syntax->byte, what) : std::string(what);
}

}  // namespace hone
