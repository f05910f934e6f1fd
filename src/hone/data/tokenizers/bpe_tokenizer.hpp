#pragma once
// BpeTokenizer: the pipeline every BPE format is an instance of, in HF tokenizers'
// order: split out added tokens -> normalize -> pre-tokenize -> BPE per piece.
// The loaders (GPT-2 files, tiktoken ranks, tokenizer.json) fill in the parts.
#include <memory>
#include <string>
#include <vector>

#include "hone/data/tokenizers/bpe.hpp"
#include "hone/data/tokenizers/split_regex.hpp"
#include "hone/data/tokenizers/tokenizer.hpp"

namespace hone {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = true;      // matched only with SpecialTokens::recognize
  bool normalized = false;  // matched in the normalized text rather than the input
  bool lstrip = false;      // swallows the whitespace on its left
  bool rstrip = false;      // and on its right
};

// Leftmost-longest matching of a set of added tokens.
class AddedTokenMatcher {
 public:
  void add(const AddedToken& token);
  bool empty() const { return tokens_.empty(); }
  // The first match in text[from, ...) among tokens allowed by `special`; returns
  // false if none. [begin, end) includes stripped whitespace.
  bool find(std::string_view text, size_t from, SpecialTokens special, size_t& begin, size_t& end,
            int32_t& id) const;

 private:
  std::vector<AddedToken> tokens_;
  StringIdMap by_content_;      // content -> index in tokens_
  std::vector<size_t> lengths_;  // distinct content lengths, longest first
  bool first_byte_[256] = {};
};

struct Normalizer {
  enum class Type { nfc, prepend, replace };
  Type type;
  std::string from, to;  // prepend: to; replace: from -> to
};

class BpeTokenizer final : public Tokenizer {
 public:
  void encode_into(std::string_view text, std::vector<int32_t>& out, SpecialTokens special) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override { return int32_t(decoded_.size()); }
  std::string_view kind() const override { return kind_; }

  // ---- set by the loaders ----
  std::string kind_;
  std::string source_;  // the file, for error messages
  BpeModel model;
  std::vector<AddedToken> added;
  std::vector<Normalizer> normalizers;
  std::unique_ptr<SplitRegex> split;  // null: the whole text is one piece
  bool prefix_space = false;          // ByteLevel(add_prefix_space): " " before text not starting with one
  // HF's Metaspace pre-tokenizer: spaces become `replacement`, which is also put
  // before the text (always, or only before the start of the input) unless it is
  // there already; with `split`, the text is cut before each replacement.
  struct Metaspace {
    enum class Prepend { always, first, never };
    std::string replacement = "\u2581";
    Prepend prepend = Prepend::always;
    bool split = true;
  };
  std::optional<Metaspace> metaspace;
  // decode: what each id turns into, and how many leading spaces of the result to drop.
  std::vector<std::string> decoded_;
  // The decoder's text replacements (Metaspace's U+2581 -> " ", Replace),
  // which finish() applies to the added tokens too, as Hugging Face's decoder does.
  std::vector<std::pair<std::string, std::string>> decode_replaces;
  // ByteFallback's <0xNN> tokens (decoded_ holds their byte): a run of them
  // that is no valid UTF-8 decodes to a U+FFFD per token, as Hugging Face's does.
  std::vector<bool> byte_token_;
  std::vector<bool> assigned_;  // ids that have a token (rank files leave gaps), set by finish()
  int strip_leading_spaces = 0;
  std::string token_separator;  // put between decoded tokens: " " for a tokenizer.json without a decoder

  // Builds the matchers and fills special_tokens(); call after the fields are set.
  void finish(std::optional<int32_t> bos, std::optional<int32_t> eos, std::optional<int32_t> pad);

 private:
  // `at_start`: the text begins at offset 0 of the input (Metaspace's "first").
  void encode_segment(std::string_view segment, bool at_start, std::vector<int32_t>& out, SpecialTokens special) const;
  // `text` through the normalizers, in order.
  std::string normalize(std::string_view text) const;
  void encode_normalized(std::string_view text, bool at_start, std::vector<int32_t>& out) const;
  void encode_pieces(std::string_view text, std::vector<int32_t>& out) const;

  AddedTokenMatcher raw_matcher_, normalized_matcher_;
};

}  // namespace hone
