#pragma once
// Tokenizer: text <-> token ids, exactly as the reference implementation of each
// supported file format does it (see docs/tokenizers.md):
//   - GPT-2 byte-level BPE: encoder.json + vocab.bpe, or HF vocab.json + merges.txt
//   - tiktoken rank files: cl100k_base, o200k_base, r50k/gpt2, Llama 3's tokenizer.model,
//     and the encoders/*.json files of the npm `tiktoken` package
//   - Hugging Face tokenizer.json: byte-level BPE (Llama 3, Qwen) and SentencePiece-style
//     BPE with byte fallback (Llama 2, Mistral)
//   - SentencePiece .model files (through libsentencepiece)
//
// Text that is not valid UTF-8 is first decoded as a browser's TextDecoder (and
// Python's errors="replace") decodes it: each maximal invalid subsequence becomes
// U+FFFD. The ids are then those the reference gives for the decoded string.
//
// encode() never adds BOS/EOS: callers add bos_id()/eos_id() where they want them.
// decode() returns the exact bytes the tokens stand for (for byte-level BPE, ids that
// cut a character in half give its partial bytes, not U+FFFD).
//
// A Tokenizer is immutable after loading; encode() and decode() may be called from
// several threads at once.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hone {

// Whether special tokens written in the text ("<|endoftext|>") become their ids
// (as tiktoken's allowed_special="all" and HF's default do) or are tokenized as
// ordinary text (tiktoken's encode_ordinary, HF's split_special_tokens=True).
enum class SpecialTokens { as_text, recognize };

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Appends the ids of `text` to `out` (no BOS/EOS).
  virtual void encode_into(std::string_view text, std::vector<int32_t>& out,
                           SpecialTokens special = SpecialTokens::as_text) const = 0;
  std::vector<int32_t> encode(std::string_view text, SpecialTokens special = SpecialTokens::as_text) const {
    std::vector<int32_t> ids;
    encode_into(text, ids, special);
    return ids;
  }
  // Throws hone::Error for an id outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;

  // One more than the largest id (special tokens included).
  virtual int32_t vocab_size() const = 0;
  // "gpt2-bpe", "tiktoken", "hf-tokenizer-json" or "sentencepiece".
  virtual std::string_view kind() const = 0;

  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  std::optional<int32_t> pad_id() const { return pad_id_; }
  // The special tokens (text, id), in id order.
  const std::vector<std::pair<std::string, int32_t>>& special_tokens() const { return special_tokens_; }
  std::optional<int32_t> special_token_id(std::string_view text) const;

 protected:
  std::optional<int32_t> bos_id_, eos_id_, pad_id_;
  std::vector<std::pair<std::string, int32_t>> special_tokens_;
};

// Loads the tokenizer at `path`: a tokenizer file or a folder holding one
// (tokenizer.json, tokenizer.model, encoder.json + vocab.bpe, vocab.json + merges.txt).
// Throws hone::Error naming the file, the line or byte offset and what was expected.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path);
// Throws hone::Error, starting with `where`, when `tokenizer` has ids past a
// model's vocabulary of `vocab_size`.
void check_fits_vocabulary(const Tokenizer& tokenizer, int64_t vocab_size, std::string_view where);
// The file(s) load_tokenizer reads in the folder `dir`, in the order it looks for
// them (one file, or GPT-2's two); empty when it holds none.
std::vector<std::filesystem::path> tokenizer_files_in(const std::filesystem::path& dir);

}  // namespace hone
