// libFuzzer target for the tokenizer-file loaders (input format: fuzz_input.hpp).
// A file that loads then encodes and decodes text. Any failure must be a
// hone::Error: another exception, a crash or a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_input.hpp"
#include "hone/core/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  try {
    const auto tokenizer = hone::fuzz::load_fuzz_input(input);
    if (!tokenizer) return 0;
    for (const auto special : {hone::SpecialTokens::as_text, hone::SpecialTokens::recognize}) {
      const auto ids = tokenizer->encode("Hello, world! \xF0\x9F\x98\x80 caf\xC3\xA9 <s>\n\n  12345 \xFF", special);
      tokenizer->decode(ids);
      tokenizer->decode(tokenizer->encode(input.substr(0, 256), special));
    }
  } catch (const hone::Error&) {
  }
  return 0;
}
