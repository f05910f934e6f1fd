// nanoGPT's character vocabulary: the meta.pkl its data/shakespeare_char/prepare.py
// writes ({'vocab_size': N, 'itos': {id: char}, 'stoi': {char: id}}), read as
// its train.py and sample.py use it: every character of the text is a token.
#include <fmt/format.h>

#include <charconv>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "hone/core/error.hpp"
#include "hone/core/pickle.hpp"
#include "hone/data/tokenizers/loaders.hpp"
#include "hone/data/tokenizers/utf8.hpp"

namespace hone {

namespace {

// The values a meta.pkl may hold (each character is two entries, itos and
// stoi), and its bytes: reading a pickle takes some hundred times its size.
constexpr size_t kMetaValues = size_t(1) << 22;
constexpr size_t kMetaBytes = size_t(16) << 20;

class CharacterTokenizer final : public Tokenizer {
 public:
  CharacterTokenizer(std::vector<std::string> characters, std::string name)
      : characters_(std::move(characters)), name_(std::move(name)) {
    for (size_t id = 0; id < characters_.size(); ++id) ids_.emplace(characters_[id], int32_t(id));
  }

  // Text that is not UTF-8 is an error, as nanoGPT reads its text with Python's strict decoder.
  void encode_into(std::string_view text, std::vector<int32_t>& out, SpecialTokens) const override {
    const size_t valid = utf8::valid_prefix(text);
    HONE_CHECK(valid == text.size(), "{}: the text is not UTF-8 at byte {} (0x{:02X}): a character vocabulary takes "
               "characters", name_, valid, static_cast<unsigned char>(text[valid]));
    for (size_t i = 0; i < text.size();) {
      const size_t start = i;
      const uint32_t code_point = utf8::next(text, i);
      const std::string_view character = text.substr(start, i - start);
      const auto found = ids_.find(std::string(character));
      HONE_CHECK(found != ids_.end(), "{}: the character U+{:04X} ({:?}) is not in this character vocabulary", name_,
                 code_point, character);
      out.push_back(found->second);
    }
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::string text;
    for (const int32_t id : ids) {
      HONE_CHECK(id >= 0 && size_t(id) < characters_.size(), "{}: token id {} is outside the vocabulary of {}", name_,
                 id, characters_.size());
      text += characters_[size_t(id)];
    }
    return text;
  }

  int32_t vocab_size() const override { return int32_t(characters_.size()); }
  std::string_view kind() const override { return "nanogpt-chars"; }

 private:
  std::vector<std::string> characters_;  // by id
  std::unordered_map<std::string, int32_t> ids_;
  std::string name_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_nanogpt_meta(std::string_view content, std::string_view name) {
  using Json = nlohmann::ordered_json;
  const std::string where(name);
  HONE_CHECK(content.size() <= kMetaBytes, "{}: a pickle of {} bytes, past the {} a character vocabulary takes", where,
             content.size(), kMetaBytes);
  const Json meta = pickle::read_plain_data({reinterpret_cast<const std::byte*>(content.data()), content.size()},
                                            where, kMetaValues);
  HONE_CHECK(meta.is_object() && meta.contains("itos") && meta["itos"].is_object(),
             "{}: a pickle without nanoGPT's character vocabulary (a dict with 'itos': id -> character)", where);
  // A value in an error: a pickle's bytes may be no UTF-8, which dump() would throw on.
  const auto shown = [](const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); };
  std::map<int64_t, std::string> by_id;
  std::unordered_set<std::string> seen;
  for (const auto& [key, value] : meta["itos"].items()) {
    int64_t id = -1;
    const auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), id);
    const bool one_character = value.is_string() && utf8::valid(value.get<std::string>()) &&
                               !value.get<std::string>().empty() &&
                               size_t(utf8::char_length(static_cast<unsigned char>(value.get<std::string>()[0]))) ==
                                   value.get<std::string>().size();
    HONE_CHECK(error == std::errc() && end == key.data() + key.size() && id >= 0 && id < int64_t(kMetaValues) &&
                   one_character,
               "{}: itos[{}] = {} is not one character for a token id", where, key, shown(value));
    HONE_CHECK(seen.insert(value.get<std::string>()).second, "{}: itos names {} twice", where, shown(value));
    by_id[id] = value.get<std::string>();
  }
  HONE_CHECK(!by_id.empty(), "{}: an empty character vocabulary", where);
  const int64_t size = by_id.rbegin()->first + 1;
  HONE_CHECK(int64_t(by_id.size()) == size, "{}: itos holds {} characters for ids up to {}: ids are missing", where,
             by_id.size(), size - 1);
  if (meta.contains("vocab_size")) {
    HONE_CHECK(meta["vocab_size"] == size, "{}: vocab_size {} but itos holds {} characters", where,
               shown(meta["vocab_size"]), size);
  }
  std::vector<std::string> characters;
  for (auto& [id, character] : by_id) characters.push_back(std::move(character));
  // stoi is itos turned around: ids it gives otherwise would encode differently than nanoGPT.
  if (meta.contains("stoi") && meta["stoi"].is_object()) {
    HONE_CHECK(int64_t(meta["stoi"].size()) == size, "{}: stoi and itos hold {} and {} characters: each character "
               "is in both", where, meta["stoi"].size(), size);
    for (const auto& [character, id] : meta["stoi"].items()) {
      HONE_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < size &&
                     characters[size_t(id.get<int64_t>())] == character,
                 "{}: stoi[{}] = {} does not match itos", where, shown(Json(character)), shown(id));
    }
  }
  return std::make_unique<CharacterTokenizer>(std::move(characters), where);
}

}  // namespace hone
