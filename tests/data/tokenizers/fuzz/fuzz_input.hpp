#pragma once
// How the fuzz target reads its input: the first byte picks the loader, the rest
// is the file (two files are separated by the first NUL byte). Shared with the
// test that checks every seed loads.
#include <cstdint>
#include <memory>
#include <string_view>

#include "hone/data/tokenizers/loaders.hpp"

namespace hone::fuzz {

inline std::unique_ptr<Tokenizer> load_fuzz_input(std::string_view input) {
  if (input.empty()) return nullptr;
  const auto kind = static_cast<uint8_t>(input[0]);
  const std::string_view file = input.substr(1);
  const size_t nul = file.find('\0');
  const std::string_view first = file.substr(0, nul);
  const std::string_view second = nul == std::string_view::npos ? std::string_view() : file.substr(nul + 1);
  switch (kind % 7) {
    case 0: return load_tiktoken_ranks(file, "cl100k_base.tiktoken");
    case 1: return load_tiktoken_json(file, "encoder.json");
    case 2: return load_gpt2_bpe(first, "encoder.json", second, "vocab.bpe");
    case 3: return load_tokenizer_json(file, "tokenizer.json");
    case 4: return load_tokenizer_json(first, "tokenizer.json", second);
    case 5: return load_sentencepiece(file, "tokenizer.model");
    default: return load_nanogpt_meta(file, "meta.pkl");
  }
}

}  // namespace hone::fuzz
