#pragma once
// The loaders behind load_tokenizer(), one per file format. Each takes the
// contents of the files (the fuzz target calls them directly) and names them in
// errors as `name`.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "hone/data/tokenizers/tokenizer.hpp"

namespace hone {

// GPT-2's encoder.json + vocab.bpe, or HF's vocab.json + merges.txt (same formats).
std::unique_ptr<Tokenizer> load_gpt2_bpe(std::string_view vocab_json, std::string_view vocab_name,
                                         std::string_view merges, std::string_view merges_name);

// A tiktoken rank file ("<base64 token> <rank>" per line): cl100k_base, o200k_base,
// r50k_base/gpt2, p50k_base or Llama 3's tokenizer.model, told apart by the file
// name and the number of ranks. `config_json` (tokenizer_config.json beside the
// file, or empty) may rename the special tokens, as Llama 3.1 and 3.2 do.
std::unique_ptr<Tokenizer> load_tiktoken_ranks(std::string_view content, std::string_view name,
                                               std::string_view config_json = {});

// Llama 3's rank file is the same in every release; Llama 3.1 and later name
// three of its reserved special tokens (<|finetune_right_pad_id|>, <|eom_id|>,
// <|python_tag|>), which only the model (its RoPE scaling) tells.
enum class Llama3Release { llama3, llama31 };

// A tiktoken rank file (read as load_tiktoken_ranks reads it) as Hugging Face's
// tokenizer.json and a tokenizer_config.json, for readers that need them
// (transformers, vLLM): what transformers' TikTokenConverter makes of it, the
// ranks as a byte-level BPE vocabulary with the merges that build each token,
// the encoding's pattern and special tokens (Llama 3's named as `release`
// names them, where config_json does not), BOS before every text where the
// encoding has one (Llama 3's).
struct HfTokenizerFiles {
  nlohmann::json tokenizer, config;
};
HfTokenizerFiles tiktoken_as_hf_tokenizer(std::string_view content, std::string_view name,
                                          std::string_view config_json, int64_t model_max_length,
                                          Llama3Release release = Llama3Release::llama3);

// The encoders/*.json files of the npm `tiktoken` package: pat_str, special_tokens,
// and bpe_ranks (rank-file lines, or "! <first rank> <base64 token>..." runs).
std::unique_ptr<Tokenizer> load_tiktoken_json(std::string_view content, std::string_view name);

// A Hugging Face tokenizer.json with a BPE model; `config_json` is the
// tokenizer_config.json beside it (or empty): it names the BOS/EOS/PAD tokens.
std::unique_ptr<Tokenizer> load_tokenizer_json(std::string_view content, std::string_view name,
                                               std::string_view config_json = {});

// nanoGPT's character vocabulary, the meta.pkl of its shakespeare_char data (a
// pickle of {'vocab_size', 'itos', 'stoi'}): each character is a token.
std::unique_ptr<Tokenizer> load_nanogpt_meta(std::string_view content, std::string_view name);

// A SentencePiece model (serialized ModelProto), through libsentencepiece.
std::unique_ptr<Tokenizer> load_sentencepiece(std::string_view content, std::string_view name);
// The precompiled_charsmap (the normalization rules) of a serialized ModelProto's
// normalizer_spec (spec_field 3) or denormalizer_spec (5), a view into `model`;
// empty where it has none.
std::string_view sentencepiece_charsmap(std::string_view model, uint64_t spec_field);

// What a tokenizer_config.json (transformers) says about special tokens.
struct TokenizerConfig {
  std::map<int32_t, std::string> added_tokens;  // added_tokens_decoder: id -> content
  std::optional<std::string> bos, eos, pad;
};
TokenizerConfig parse_tokenizer_config(std::string_view content, std::string_view name);

// GPT-2's byte-level alphabet: each byte is shown as one printable character.
// Decodes such a string back into bytes; false if a character is outside it.
bool byte_level_to_bytes(std::string_view text, std::string& bytes);

}  // namespace hone
