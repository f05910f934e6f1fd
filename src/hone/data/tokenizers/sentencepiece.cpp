// SentencePiece .model files through libsentencepiece: the reference
// implementation itself, wrapped in the Tokenizer interface.
#include <sentencepiece_processor.h>

#include <algorithm>

#include "hone/core/error.hpp"
#include "hone/data/tokenizers/bpe_tokenizer.hpp"
#include "hone/data/tokenizers/loaders.hpp"
#include "hone/data/tokenizers/utf8.hpp"

namespace hone {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::string_view content, std::string_view name) : name_(name) {
    const auto status = processor_.LoadFromSerializedProto(content);
    HONE_CHECK(status.ok(), "{}: not a SentencePiece model (expected a serialized ModelProto): {}", name,
               status.ToString());
    HONE_CHECK(processor_.GetPieceSize() > 0, "{}: SentencePiece model has no pieces", name);
    // SentencePiece itself reads "<s>" in text as text; with SpecialTokens::recognize
    // the control and unknown pieces are split out first, as HF's Llama 2 tokenizer does.
    for (int id = 0; id < processor_.GetPieceSize(); ++id) {
      if (processor_.IsControl(id) || processor_.IsUnknown(id)) {
        const std::string& piece = processor_.IdToPiece(id);
        if (piece.empty()) continue;
        special_tokens_.emplace_back(piece, id);
        matcher_.add(AddedToken{.content = piece, .id = id});
      }
    }
    const auto optional_id = [](int id) { return id >= 0 ? std::optional<int32_t>(id) : std::nullopt; };
    bos_id_ = optional_id(processor_.bos_id());
    eos_id_ = optional_id(processor_.eos_id());
    pad_id_ = optional_id(processor_.pad_id());
  }

  void encode_into(std::string_view text, std::vector<int32_t>& out, SpecialTokens special) const override {
    std::string storage;
    text = utf8::sanitize(text, storage);
    size_t pos = 0, begin, end;
    int32_t id;
    while (matcher_.find(text, pos, special, begin, end, id)) {
      encode_segment(text.substr(pos, begin - pos), out);
      out.push_back(id);
      pos = end;
    }
    encode_segment(text.substr(pos), out);
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::vector<int> v(ids.begin(), ids.end());
    for (const int id : v)
      HONE_CHECK(id >= 0 && id < processor_.GetPieceSize(), "token id {} is outside the vocabulary of {} (size {})",
                 id, name_, processor_.GetPieceSize());
    std::string text;
    const auto status = processor_.Decode(v, &text);
    HONE_CHECK(status.ok(), "{}: SentencePiece could not decode: {}", name_, status.ToString());
    return text;
  }

  int32_t vocab_size() const override { return processor_.GetPieceSize(); }
  std::string_view kind() const override { return "sentencepiece"; }

 private:
  void encode_segment(std::string_view text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    std::vector<int> ids;
    const auto status = processor_.Encode(text, &ids);
    HONE_CHECK(status.ok(), "{}: SentencePiece could not encode: {}", name_, status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }

  std::string name_;
  sentencepiece::SentencePieceProcessor processor_;
  AddedTokenMatcher matcher_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(std::string_view content, std::string_view name) {
  return std::make_unique<SentencePieceTokenizer>(content, name);
}

}  // namespace hone
