#include <gtest/gtest.h>

#include "hone/core/error.hpp"
#include "hone/core/json_text.hpp"

namespace hone {
namespace {

// What nlohmann would misread (a NUL ends its input) or could not copy (deep nesting).
TEST(JsonText, ANulOrDeepNestingIsRefused) {
  const auto error_of = [](std::string_view text) {
    try {
      check_json_text(text, "f.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of(R"({"a": [1, {"b": "[[[{{{\"]]"}], "c": "\\"})"), "no error");  // brackets in strings do not count
  EXPECT_EQ(error_of(std::string(512, '[') + std::string(512, ']')), "no error");
  EXPECT_EQ(error_of(std::string(513, '[') + std::string(513, ']')),
            "f.json: byte 512: arrays and objects nested more than 512 deep");
  EXPECT_EQ(error_of(std::string("{\"a\": 1}\0{{{", 12)),
            "f.json: byte 8 is NUL, which JSON text cannot hold (binary data?)");
}

template <class JsonValue>
std::string parse_error_of(std::string_view text) {
  try {
    parse_json_text<JsonValue>(text, "f.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(JsonText, ParsedWithTheKeysOrderKeptWhereAsked) {
  EXPECT_EQ(parse_json_text<nlohmann::ordered_json>(R"({"b": 1, "a": [2.5, "x"]})", "f.json").dump(),
            R"({"b":1,"a":[2.5,"x"]})");
  EXPECT_EQ(parse_json_text<nlohmann::json>(R"({"b": 1, "a": null})", "f.json").dump(), R"({"a":null,"b":1})");
}

// Every reader's errors read alike: the file, the byte, nlohmann's account without its tag.
TEST(JsonText, ErrorsNameTheFileAndTheByte) {
  EXPECT_EQ(parse_error_of<nlohmann::json>("{\"a\": 1,\n \"b\" 2}"),
            "f.json: not valid JSON (byte 15: parse error at line 2, column 6: syntax error while parsing object "
            "separator - unexpected number literal; expected ':')");
  EXPECT_EQ(parse_error_of<nlohmann::ordered_json>("[1e999]"),
            "f.json: not valid JSON (number overflow parsing '1e999')");
  EXPECT_EQ(parse_error_of<nlohmann::json>(""),
            "f.json: not valid JSON (byte 1: parse error at line 1, column 1: syntax error while parsing value - "
            "unexpected end of input; expected '[', '{', or a literal)");
  // The text after a NUL is not dropped: nlohmann alone would take {"a": 1} for the whole.
  EXPECT_EQ(parse_error_of<nlohmann::json>(std::string("{\"a\": 1}\0{", 10)),
            "f.json: byte 8 is NUL, which JSON text cannot hold (binary data?)");
}

}  // namespace
}  // namespace hone
