#pragma once
// nlohmann's parse errors as hone's messages put them.
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace hone {

// What nlohmann's error says, without its "[json.exception.parse_error.101] " tag,
// after the byte it names (1-based, from the start of the parsed text) plus
// `first_byte`: "byte 12: parse error at line 1, column 3: ...".
std::string json_error_text(const nlohmann::json::exception& e, size_t first_byte = 0);

}  // namespace hone
