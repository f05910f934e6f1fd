#include "hone/data/tokenizers/bpe_tokenizer.hpp"

#include <unicode/normalizer2.h>
#include <unicode/bytestream.h>

#include <algorithm>

#include "hone/core/error.hpp"
#include "hone/core/text.hpp"
#include "hone/data/tokenizers/utf8.hpp"

namespace hone {
namespace {

// Unicode NFC through ICU; text below U+0300 is already NFC and skips it.
void append_nfc(std::string_view text, std::string& out) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0xCC; })) {
    out.append(text);
    return;
  }
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  HONE_CHECK(U_SUCCESS(status), "ICU has no NFC normalizer: {}", u_errorName(status));
  icu::StringByteSink<std::string> sink(&out, int32_t(text.size()));
  nfc->normalizeUTF8(0, icu::StringPiece(text.data(), int32_t(text.size())), sink, nullptr, status);
  HONE_CHECK(U_SUCCESS(status), "NFC normalization failed: {}", u_errorName(status));
}

// The character before text[end] (valid UTF-8); its start goes to `start`.
uint32_t char_before(std::string_view text, size_t end, size_t& start) {
  start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  size_t i = start;
  return utf8::next(text, i);
}

}  // namespace

// ---- AddedTokenMatcher ----

void AddedTokenMatcher::add(const AddedToken& token) {
  if (token.content.empty()) return;
  if (!by_content_.insert(token.content, int32_t(tokens_.size()))) return;  // first one wins
  tokens_.push_back(token);
  first_byte_[static_cast<unsigned char>(token.content[0])] = true;
  if (std::find(lengths_.begin(), lengths_.end(), token.content.size()) == lengths_.end()) {
    lengths_.push_back(token.content.size());
    std::sort(lengths_.begin(), lengths_.end(), std::greater<>());
  }
}

bool AddedTokenMatcher::find(std::string_view text, size_t from, SpecialTokens special, size_t& begin, size_t& end,
                             int32_t& id) const {
  if (tokens_.empty()) return false;
  for (size_t i = from; i < text.size(); ++i) {
    if (!first_byte_[static_cast<unsigned char>(text[i])]) continue;
    for (const size_t length : lengths_) {
      if (i + length > text.size()) continue;
      const auto index = by_content_.find(text.substr(i, length));
      if (!index) continue;
      const AddedToken& t = tokens_[size_t(*index)];
      if (t.special && special == SpecialTokens::as_text) continue;
      begin = i;
      end = i + length;
      id = t.id;
      if (t.lstrip) {
        size_t start;
        while (begin > from && utf8::is_white_space(char_before(text, begin, start))) begin = start;
      }
      if (t.rstrip) {
        while (end < text.size()) {
          size_t next = end;
          if (!utf8::is_white_space(utf8::next(text, next))) break;
          end = next;
        }
      }
      return true;
    }
  }
  return false;
}

// ---- BpeTokenizer ----

void BpeTokenizer::finish(std::optional<int32_t> bos, std::optional<int32_t> eos, std::optional<int32_t> pad) {
  for (const AddedToken& t : added) {
    if (t.normalized && !normalizers.empty()) {
      // Matched in the normalized text as its normalized content, as Hugging
      // Face's added vocabulary does: Llama 2's "<tool>" as "▁<tool>", taking
      // the space before it; "hello world" as "▁hello▁world".
      AddedToken normalized = t;
      normalized.content = normalize(t.content);
      normalized_matcher_.add(normalized);
    } else {
      raw_matcher_.add(t);
    }
    if (size_t(t.id) >= decoded_.size()) decoded_.resize(size_t(t.id) + 1);
    decoded_[size_t(t.id)] = t.content;
    for (const auto& [from, to] : decode_replaces) replace_all(decoded_[size_t(t.id)], from, to);
    if (size_t(t.id) < byte_token_.size()) byte_token_[size_t(t.id)] = false;
    if (t.special) special_tokens_.emplace_back(t.content, t.id);
  }
  assigned_.assign(decoded_.size(), false);
  for (int32_t id = 0; id < model.size(); ++id) assigned_[size_t(id)] = model.has_token(id);
  for (const AddedToken& t : added) assigned_[size_t(t.id)] = true;
  std::sort(special_tokens_.begin(), special_tokens_.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  special_tokens_.erase(std::unique(special_tokens_.begin(), special_tokens_.end()), special_tokens_.end());
  bos_id_ = bos;
  eos_id_ = eos;
  pad_id_ = pad;
}

void BpeTokenizer::encode_into(std::string_view text, std::vector<int32_t>& out, SpecialTokens special) const {
  std::string storage;
  text = utf8::sanitize(text, storage);
  size_t pos = 0, begin, end;
  int32_t id;
  while (raw_matcher_.find(text, pos, special, begin, end, id)) {
    encode_segment(text.substr(pos, begin - pos), pos == 0, out, special);
    out.push_back(id);
    pos = end;
  }
  encode_segment(text.substr(pos), pos == 0, out, special);
}

void BpeTokenizer::encode_segment(std::string_view segment, bool at_start, std::vector<int32_t>& out,
                                  SpecialTokens special) const {
  if (segment.empty()) return;
  if (normalizers.empty()) {
    encode_normalized(segment, at_start, out);
    return;
  }
  const std::string text = normalize(segment);
  size_t pos = 0, begin, end;
  int32_t id;
  while (normalized_matcher_.find(text, pos, special, begin, end, id)) {
    encode_normalized(std::string_view(text).substr(pos, begin - pos), at_start && pos == 0, out);
    out.push_back(id);
    pos = end;
  }
  encode_normalized(std::string_view(text).substr(pos), at_start && pos == 0, out);
}

std::string BpeTokenizer::normalize(std::string_view segment) const {
  std::string text(segment);
  for (const Normalizer& n : normalizers) {
    switch (n.type) {
      case Normalizer::Type::nfc: {
        std::string normalized;
        append_nfc(text, normalized);
        text = std::move(normalized);
        break;
      }
      case Normalizer::Type::prepend:
        if (!text.empty()) text.insert(0, n.to);
        break;
      case Normalizer::Type::replace:
        replace_all(text, n.from, n.to);
        break;
    }
  }
  return text;
}

void BpeTokenizer::encode_normalized(std::string_view text, bool at_start, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string rewritten;
  if (prefix_space && text.front() != ' ') {
    rewritten.reserve(text.size() + 1);
    rewritten += ' ';
    rewritten.append(text);
    text = rewritten;
  }
  if (metaspace) {
    const std::string_view r = metaspace->replacement;
    rewritten.assign(text);
    replace_all(rewritten, " ", r);
    const bool prepend = metaspace->prepend == Metaspace::Prepend::always ||
                         (metaspace->prepend == Metaspace::Prepend::first && at_start);
    if (prepend && !std::string_view(rewritten).starts_with(r)) rewritten.insert(0, r);
    text = rewritten;
    if (metaspace->split) {
      size_t start = 0;
      for (size_t p = text.find(r, 1); p != std::string_view::npos; p = text.find(r, p + r.size())) {
        model.encode(text.substr(start, p - start), out);
        start = p;
      }
      model.encode(text.substr(start), out);
      return;
    }
  }
  encode_pieces(text, out);
}

void BpeTokenizer::encode_pieces(std::string_view text, std::vector<int32_t>& out) const {
  if (!split) {
    if (!model.splits_before_metaspace()) {
      model.encode(text, out);
      return;
    }
    constexpr std::string_view kMetaspace = "\u2581";
    size_t start = 0;
    for (size_t p = text.find(kMetaspace, 1); p != std::string_view::npos; p = text.find(kMetaspace, p + 1)) {
      if (p >= kMetaspace.size() && text.compare(p - kMetaspace.size(), kMetaspace.size(), kMetaspace) == 0) continue;
      model.encode(text.substr(start, p - start), out);
      start = p;
    }
    model.encode(text.substr(start), out);
    return;
  }
  SplitRegex::Pieces pieces(*split, text);
  std::string_view piece;
  while (pieces.next(piece)) model.encode(piece, out);
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out, bytes;  // bytes: the run of byte tokens being read
  size_t run = 0;
  bool first = true;
  const auto end_run = [&] {
    if (utf8::valid(bytes)) out += bytes;
    else for (size_t i = 0; i < run; ++i) out += "\uFFFD";
    bytes.clear();
    run = 0;
  };
  for (const int32_t id : ids) {
    HONE_CHECK(id >= 0 && size_t(id) < decoded_.size(), "token id {} is outside the vocabulary of {} (size {})", id,
               source_, decoded_.size());
    HONE_CHECK(assigned_[size_t(id)], "token id {} is not assigned to any token in {}", id, source_);
    if (size_t(id) < byte_token_.size() && byte_token_[size_t(id)]) {
      bytes += decoded_[size_t(id)];
      ++run;
      continue;
    }
    if (run > 0) end_run();
    if (!first) out += token_separator;
    first = false;
    out += decoded_[size_t(id)];
  }
  if (run > 0) end_run();
  size_t strip = 0;
  while (int(strip) < strip_leading_spaces && strip < out.size() && out[strip] == ' ') ++strip;
  out.erase(0, strip);
  return out;
}

}  // namespace hone
