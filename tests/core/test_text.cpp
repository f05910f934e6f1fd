#include <gtest/gtest.h>

#include "hone/core/error.hpp"
#include "hone/core/text.hpp"

namespace hone {
namespace {

TEST(Text, BytesInBinaryUnits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(2603513344.0), "2.42 GiB");
  EXPECT_EQ(format_bytes(3.0 * 1024 * 1024 * 1024 * 1024 * 1024), "3072.00 TiB");  // no unit above TiB
}

TEST(Text, CountsReadAsEnglish) {
  EXPECT_EQ(plural(1, "step"), "step");
  EXPECT_EQ(plural(0, "step"), "steps");
  EXPECT_EQ(plural(2, "micro-batch", "micro-batches"), "micro-batches");
  EXPECT_EQ(plural(1, "micro-batch", "micro-batches"), "micro-batch");
}

TEST(Text, StripsAsPythonsStr) {
  // (A string break after each \x escape: "\x1fab" would be one character.)
  EXPECT_EQ(python_lstrip(" \t\n\x1c\x1f" "ab c \x0b"), "ab c \x0b");
  EXPECT_EQ(python_strip(" \t\n\x1c\x1f" "ab c \x0b\x1e"), "ab c");
  EXPECT_EQ(python_strip("   "), "");
  EXPECT_EQ(python_strip("\x1bx"), "\x1bx");  // ESC is not whitespace
  // Unicode's spaces, as str.isspace() (and Jinja's trim in chat templates) takes them:
  // NO-BREAK SPACE, NEL, IDEOGRAPHIC SPACE, LINE SEPARATOR, EN QUAD, NARROW NO-BREAK SPACE.
  EXPECT_EQ(python_strip("\u00a0\u0085Hi\u3000\u2028\u2000\u202f"), "Hi");
  EXPECT_EQ(python_strip("\u3000\u3053\u3093\u3000"), "\u3053\u3093");  // こん: no space, kept
  EXPECT_EQ(python_strip("x\u200b"), "x\u200b");  // ZERO WIDTH SPACE is not white space to Python
  EXPECT_EQ(python_strip("\xa0x\xa0"), "\xa0x\xa0");  // lone continuation bytes stay
  EXPECT_EQ(python_lstrip("\u00a0 x "), "x ");
}

// As Python's csv.writer writes them and csv.reader reads them.
TEST(Text, QuotesCsvFieldsAsRfc4180) {
  EXPECT_EQ(csv_field("llama_tiny"), "llama_tiny");
  EXPECT_EQ(csv_field("llama_tiny with dim 64, n_layers 2"), "\"llama_tiny with dim 64, n_layers 2\"");
  EXPECT_EQ(csv_field("a \"b\""), "\"a \"\"b\"\"\"");
  const std::string line = csv_field("x, y") + ",bf16," + csv_field("say \"hi\", twice") + ",,3";
  EXPECT_EQ(csv_fields(line), (std::vector<std::string>{"x, y", "bf16", "say \"hi\", twice", "", "3"}));
}

}  // namespace
}  // namespace hone
