// SentencePiece .model files through libsentencepiece: the reference
// implementation itself, wrapped in the Tokenizer interface.
#include <fmt/format.h>
#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hone/core/error.hpp"
#include "hone/data/tokenizers/bpe_tokenizer.hpp"
#include "hone/data/tokenizers/loaders.hpp"
#include "hone/data/tokenizers/utf8.hpp"

namespace hone {
namespace {

// Protocol buffers' wire format, as far as finding one bytes field takes.
class WireReader {
 public:
  explicit WireReader(std::string_view bytes) : bytes_(bytes) {}

  // The next field's number and, for a length-delimited one, its bytes;
  // nullopt at the end, or where the bytes are no protocol buffer.
  std::optional<std::pair<uint64_t, std::string_view>> next() {
    const std::optional<uint64_t> key = varint();
    if (!key) return std::nullopt;
    std::string_view value;
    switch (*key & 7) {
      case 0:
        if (!varint()) return std::nullopt;
        break;
      case 1:
      case 5: {
        const size_t size = (*key & 7) == 1 ? 8 : 4;
        if (bytes_.size() - pos_ < size) return std::nullopt;
        pos_ += size;
        break;
      }
      case 2: {
        const std::optional<uint64_t> size = varint();
        if (!size || *size > bytes_.size() - pos_) return std::nullopt;
        value = bytes_.substr(pos_, *size);
        pos_ += *size;
        break;
      }
      default:  // groups, which SentencePiece's messages do not use
        return std::nullopt;
    }
    return std::pair{*key >> 3, value};
  }

 private:
  std::optional<uint64_t> varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64 && pos_ < bytes_.size(); shift += 7) {
      const auto byte = uint8_t(bytes_[pos_++]);
      value |= uint64_t(byte & 0x7F) << shift;
      if (byte < 0x80) return value;
    }
    return std::nullopt;
  }

  std::string_view bytes_;
  size_t pos_ = 0;
};

// Why libsentencepiece would read past a precompiled_charsmap, or nullopt
// where it stays inside: it follows the charsmap's trie (a darts-clone double
// array) without checking the indices, and reads each rule's replacement as a
// C string at an offset the trie gives. A damaged model crashed it. Checked
// here once, over every node a text can reach.
std::optional<std::string> charsmap_damage(std::string_view charsmap) {
  if (charsmap.empty()) return std::nullopt;  // no normalization rules
  uint32_t trie_bytes = 0;
  if (charsmap.size() <= sizeof(trie_bytes)) return std::nullopt;  // SentencePiece refuses it itself
  std::memcpy(&trie_bytes, charsmap.data(), sizeof(trie_bytes));
  // SentencePiece refuses a trie size of the whole charsmap's or more, forgetting the 4 bytes that give it.
  if (uint64_t(trie_bytes) + sizeof(trie_bytes) > charsmap.size()) {
    return fmt::format("its trie of {} bytes runs past the {} bytes after its size", trie_bytes,
                       charsmap.size() - sizeof(trie_bytes));
  }
  const size_t units = trie_bytes / 4;
  if (units == 0) return "its trie is empty";
  const auto unit = [&](size_t i) {
    uint32_t u;
    std::memcpy(&u, charsmap.data() + 4 + 4 * i, 4);
    return u;
  };
  // darts-clone's unit: a label (the byte, or bit 31 for a value), a leaf flag, and the offset to its children.
  const auto children = [&](size_t i) {
    return uint64_t(i) ^ ((uint64_t(unit(i)) >> 10) << ((unit(i) & (1u << 9)) >> 6));
  };
  const std::string_view replacements = charsmap.substr(4 + size_t(trie_bytes));
  const size_t last_nul = replacements.rfind('\0');
  std::vector<bool> seen(units);
  std::vector<size_t> pending = {0};
  seen[0] = true;
  while (!pending.empty()) {
    const size_t node = pending.back();
    pending.pop_back();
    const uint64_t base = children(node);
    if ((base | 0xFF) >= units) return fmt::format("unit {} points past the trie's {} units", node, units);
    for (uint32_t byte = 0; byte < 256; ++byte) {
      const size_t child = size_t(base ^ byte);
      if ((unit(child) & ((1u << 31) | 0xFF)) != byte) continue;  // not this byte's child
      if (unit(child) & (1u << 8)) {  // a rule ends here: its replacement's offset is in the unit below
        const uint64_t value_unit = children(child);
        if (value_unit >= units) return fmt::format("unit {} points past the trie's {} units", child, units);
        const uint32_t offset = unit(size_t(value_unit)) & 0x7FFFFFFF;
        if (last_nul == std::string_view::npos || offset > last_nul)
          return fmt::format("a rule's replacement at byte {} runs past the {} bytes of replacements", offset,
                             replacements.size());
      }
      if (!seen[child]) {
        seen[child] = true;
        pending.push_back(child);
      }
    }
  }
  return std::nullopt;
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::string_view content, std::string_view name) : name_(name) {
    const auto status = processor_.LoadFromSerializedProto(content);
    HONE_CHECK(status.ok(), "{}: not a SentencePiece model (expected a serialized ModelProto): {}", name,
               status.ToString());
    HONE_CHECK(processor_.GetPieceSize() > 0, "{}: SentencePiece model has no pieces", name);
    for (const auto& [field, spec] : {std::pair{3, "normalizer_spec"}, std::pair{5, "denormalizer_spec"}}) {
      const std::optional<std::string> damage = charsmap_damage(sentencepiece_charsmap(content, field));
      HONE_CHECK(!damage, "{}: the {}'s precompiled_charsmap is damaged: {} (SentencePiece would read outside it)",
                 name, spec, *damage);
    }
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

std::string_view sentencepiece_charsmap(std::string_view model, uint64_t spec_field) {
  // The charsmap is the spec's field 2; of repeated fields the last counts, as a protocol buffer's parser takes them.
  std::string_view charsmap;
  WireReader fields(model);
  while (const auto field = fields.next()) {
    if (field->first != spec_field) continue;
    WireReader spec(field->second);
    while (const auto inner = spec.next())
      if (inner->first == 2) charsmap = inner->second;
  }
  return charsmap;
}

}  // namespace hone
