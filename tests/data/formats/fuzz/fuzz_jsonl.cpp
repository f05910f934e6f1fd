// libFuzzer target: a JSONL file, plain, gzip or zstd, streamed line by line and
// parsed for the keys "text" and "meta".
#include <cstdio>
#include <string>
#include <vector>

#include "hone/core/error.hpp"
#include "hone/data/formats/inputs.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::FILE* file = fmemopen(const_cast<uint8_t*>(data), size, "rb");
  if (!file) return 0;
  const std::vector<std::string> keys{"text", "meta"};
  std::vector<std::string> values;
  try {
    hone::data::InputStream in(file, "fuzz.jsonl");
    std::string line;
    for (int number = 1; in.read_line(line); ++number) {
      try {
        hone::data::parse_jsonl_line(line, keys, "fuzz.jsonl:" + std::to_string(number), values);
        if (values.size() != keys.size()) __builtin_trap();
      } catch (const hone::Error&) {
      }
    }
  } catch (const hone::Error&) {
  }
  std::fclose(file);
  return 0;
}
