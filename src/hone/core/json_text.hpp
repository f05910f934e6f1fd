#pragma once
// JSON text as every hone reader takes it: text nlohmann would misread refused
// first, and nlohmann's errors turned into hone's, naming the file (or line) and the byte.
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "hone/core/error.hpp"

namespace hone {

// Throws hone::Error naming `where` for JSON text nlohmann would misread or
// could not use: a NUL byte (its lexer takes one for the end of the input, so
// the text before it would pass for the whole), or arrays and objects nested
// more than 512 deep (no real file is; copying or printing such a value recurses
// once a level, and a hostile file's hundred thousand levels overflow the stack).
void check_json_text(std::string_view text, std::string_view where);

// What nlohmann's error says, without its "[json.exception.parse_error.101] " tag,
// after the byte it names (1-based, from the start of the parsed text) plus
// `first_byte`: "byte 12: parse error at line 1, column 3: ...".
std::string json_error_text(const nlohmann::json::exception& e, size_t first_byte = 0);

// `text` parsed (as nlohmann::json, or ordered_json where the keys' order is
// kept); throws hone::Error "<where>: not valid JSON (byte 12: ...)" for a syntax
// error or a number past a double, and check_json_text's errors.
template <class JsonValue>
JsonValue parse_json_text(std::string_view text, std::string_view where) {
  check_json_text(text, where);
  try {
    return JsonValue::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON ({})", where, json_error_text(e));
  }
}

}  // namespace hone
