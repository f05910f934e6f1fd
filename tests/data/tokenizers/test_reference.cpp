// Id-for-id agreement with the reference implementations (reference/*.json, written
// by reference/generate.mjs), and decode(encode(x)) == x.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

#include <nlohmann/json.hpp>

#include "assets.hpp"
#include "hone/core/files.hpp"
#include "hone/data/tokenizers/loaders.hpp"
#include "hone/data/tokenizers/tokenizer.hpp"
#include "hone/data/tokenizers/utf8.hpp"

namespace hone::test {
namespace {

using nlohmann::json;

struct Case {
  std::string reference;  // reference/<name>.json
  std::string tokenizer;  // under the asset cache
  std::string kind;
  int32_t vocab_size;
  std::optional<int32_t> bos, eos, pad;
  std::string special;  // one of its special tokens, and its id
  int32_t special_id;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.tokenizer << " vs reference/" << c.reference << ".json"; }

std::string case_name(const testing::TestParamInfo<Case>& info) {
  std::string name = info.param.tokenizer;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

// The text an entry of a reference file stands for.
std::string entry_text(const json& entry) {
  if (entry.contains("text")) return entry["text"].get<std::string>();
  if (entry.contains("file")) return read_file(source_path(entry["file"].get<std::string>()));
  std::string text;
  for (const json& r : entry["ranges"]) {
    const std::string file = read_file(asset_path("corpora/" + r["file"].get<std::string>()));
    text += file.substr(r["offset"].get<size_t>(), r["length"].get<size_t>());
  }
  return text;
}

std::vector<int32_t> encode(const Tokenizer& t, const std::string& text, const std::string& mode, bool special) {
  if (mode == "as_text_per_line") {  // spm_encode reads one sentence per line
    std::vector<int32_t> ids;
    for (size_t pos = 0; pos < text.size();) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      t.encode_into(std::string_view(text).substr(pos, end - pos), ids);
      pos = end + 1;
    }
    return ids;
  }
  const bool recognize = special || mode == "recognize";
  return t.encode(text, recognize ? SpecialTokens::recognize : SpecialTokens::as_text);
}

// FNV-1a 32 over the ids as little-endian u32, as generate.mjs hashes them.
std::string fnv(const std::vector<int32_t>& ids) {
  uint32_t h = 0x811c9dc5u;
  for (const int32_t id : ids) {
    for (int k = 0; k < 4; ++k) {
      h ^= (uint32_t(id) >> (8 * k)) & 0xFF;
      h *= 0x01000193u;
    }
  }
  return fmt::format("{:08x}", h);
}

// Where two id sequences first differ, with the text around it.
std::string first_difference(const Tokenizer& t, const std::vector<int32_t>& actual, const std::vector<int32_t>& expected) {
  size_t i = 0;
  while (i < actual.size() && i < expected.size() && actual[i] == expected[i]) ++i;
  const size_t from = i >= 3 ? i - 3 : 0;
  const auto window = [&](const std::vector<int32_t>& v) {
    const std::vector<int32_t> part(v.begin() + ptrdiff_t(std::min(from, v.size())),
                                    v.begin() + ptrdiff_t(std::min(i + 5, v.size())));
    std::string pieces;
    for (const int32_t id : part) {
      try {
        pieces += fmt::format("{:?} ", t.decode(std::vector<int32_t>{id}));
      } catch (const Error&) {
        pieces += "<bad id> ";
      }
    }
    return fmt::format("[{}] {}", fmt::join(part, ", "), pieces);
  };
  return fmt::format("{} ids, expected {}; first difference at id {}:\n  got      {}\n  expected {}", actual.size(),
                     expected.size(), i, window(actual), window(expected));
}

class Reference : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    reference_ = json::parse(read_file(source_path("tests/data/tokenizers/reference/" + GetParam().reference + ".json")));
    tokenizer_ = load_tokenizer(asset_path(GetParam().tokenizer));
  }
  void check_texts();
  void check_corpora();
  void check_round_trips();
  void check_special_tokens();
  json reference_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

// One test per tokenizer (its load is the expensive part): the sample texts id
// for id, every whole corpus file by count and hash, and decode(encode(x)).
TEST_P(Reference, MatchesAndRoundTrips) {
  SCOPED_TRACE("reference/" + GetParam().reference + ".json");
  check_texts();
  check_corpora();
  check_round_trips();
  check_special_tokens();
}

void Reference::check_special_tokens() {
  const Case& c = GetParam();
  const Tokenizer& t = *tokenizer_;
  EXPECT_EQ(t.kind(), c.kind);
  EXPECT_EQ(t.vocab_size(), c.vocab_size);
  EXPECT_EQ(t.bos_id(), c.bos);
  EXPECT_EQ(t.eos_id(), c.eos);
  EXPECT_EQ(t.pad_id(), c.pad);
  EXPECT_EQ(t.special_token_id(c.special), c.special_id);
  EXPECT_FALSE(t.special_token_id("no such token").has_value());
  // Written in the text, a special token is text unless asked for.
  const std::string text = "a" + c.special + "b";
  const auto as_text = t.encode(text);
  const auto recognized = t.encode(text, SpecialTokens::recognize);
  EXPECT_EQ(std::count(recognized.begin(), recognized.end(), c.special_id), 1);
  EXPECT_EQ(std::count(as_text.begin(), as_text.end(), c.special_id), 0);
  EXPECT_THROW(t.decode(std::vector<int32_t>{t.vocab_size()}), Error);
  EXPECT_THROW(t.decode(std::vector<int32_t>{-1}), Error);
}

void Reference::check_texts() {
  const std::string mode = reference_["mode"];
  for (const auto& [name, entry] : reference_["texts"].items()) {
    const std::vector<int32_t> expected = entry["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> actual = encode(*tokenizer_, entry_text(entry), mode, entry.value("special", false));
    EXPECT_TRUE(actual == expected) << name << ": " << first_difference(*tokenizer_, actual, expected);
  }
}

void Reference::check_corpora() {
  const std::string mode = reference_["mode"];
  std::vector<std::string> wrong;
  for (const auto& [file, expected] : reference_["corpus"].items()) {
    std::string storage;
    const std::vector<int32_t> ids = encode(*tokenizer_, read_file(asset_path("corpora/" + file)), mode, false);
    if (ids.size() != expected[0].get<size_t>() || fnv(ids) != expected[1].get<std::string>())
      wrong.push_back(fmt::format("{} ({} ids, expected {})", file, ids.size(), expected[0].get<size_t>()));
  }
  EXPECT_TRUE(wrong.empty()) << wrong.size() << " of " << reference_["corpus"].size()
                             << " files differ from the reference: " << fmt::format("{}", fmt::join(wrong, ", "));
  EXPECT_GE(reference_["corpus"].size(), mode == "as_text_per_line" ? 100u : 270u);
}

std::string nfc(const std::string& text) {
  UErrorCode status = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out);
  icu::Normalizer2::getNFCInstance(status)->normalizeUTF8(0, text, sink, nullptr, status);
  EXPECT_TRUE(U_SUCCESS(status));
  return out;
}

std::string spaces_for_metaspace(const std::string& text) {
  std::string out;
  for (size_t pos = 0;;) {
    const size_t hit = text.find("\u2581", pos);
    out.append(text, pos, hit == std::string::npos ? std::string::npos : hit - pos);
    if (hit == std::string::npos) return out;
    out += ' ';
    pos = hit + 3;
  }
}

// decode(encode(x)) gives back x after what the format's normalization does to
// it: invalid UTF-8 becomes U+FFFD, SentencePiece-style formats write spaces as
// U+2581 (so U+2581 comes back as a space), tokenizer.json normalizers apply.
// Not for special tokens in SentencePiece-style text: each stretch between them
// gets its own leading U+2581 there, by design.
void Reference::check_round_trips() {
  const bool spm_style = tokenizer_->kind() == "sentencepiece" || GetParam().reference == "mistral";
  const bool normalizes_nfc = GetParam().reference == "qwen3";
  for (const auto& [name, entry] : reference_["texts"].items()) {
    std::string storage;
    std::string text(utf8::sanitize(entry_text(entry), storage));
    const bool special = entry.value("special", false);
    if (special && spm_style) continue;
    const std::string decoded =
        tokenizer_->decode(tokenizer_->encode(text, special ? SpecialTokens::recognize : SpecialTokens::as_text));
    if (spm_style) text = spaces_for_metaspace(text);
    if (normalizes_nfc) text = nfc(text);
    EXPECT_EQ(decoded, text) << name;
  }
}

// HF's GPT-2 tokenizer.json is vocab.json + merges.txt under a lone ByteLevel
// pre-tokenizer that applies GPT-2's regex itself; written here from those files,
// it must give tiktoken's GPT-2 ids.
TEST(TokenizerJson, Gpt2LayoutMatchesTiktoken) {
  json vocab = json::parse(read_file(asset_path("tokenizers/gpt2-hf/vocab.json")));
  vocab.erase("<|endoftext|>");
  json merges = json::array();
  const std::string merges_txt = read_file(asset_path("tokenizers/gpt2-hf/merges.txt"));
  for (size_t pos = merges_txt.find('\n') + 1; pos < merges_txt.size();) {  // after "#version"
    const size_t end = merges_txt.find('\n', pos);
    if (end > pos) merges.push_back(merges_txt.substr(pos, end - pos));
    pos = end + 1;
  }
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  const json file = {
      {"added_tokens", {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}, {"normalized", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", byte_level},
      {"decoder", byte_level},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  const auto t = load_tokenizer_json(file.dump(), "gpt2/tokenizer.json");
  const json reference = json::parse(read_file(source_path("tests/data/tokenizers/reference/gpt2.json")));
  for (const auto& [name, entry] : reference["texts"].items()) {
    const bool special = entry.value("special", false);
    const auto actual = t->encode(entry_text(entry), special ? SpecialTokens::recognize : SpecialTokens::as_text);
    EXPECT_TRUE(actual == entry["ids"].get<std::vector<int32_t>>()) << name;
  }
}

constexpr std::nullopt_t none = std::nullopt;

INSTANTIATE_TEST_SUITE_P(
    Tokenizers, Reference,
    testing::Values(
        Case{"gpt2", "tokenizers/gpt2/encoder.json", "gpt2-bpe", 50257, 50256, 50256, none, "<|endoftext|>", 50256},
        Case{"gpt2", "tokenizers/gpt2-hf/merges.txt", "gpt2-bpe", 50257, 50256, 50256, none, "<|endoftext|>", 50256},
        Case{"gpt2", "tokenizers/tiktoken/gpt2.json", "tiktoken", 50257, 50256, 50256, none, "<|endoftext|>", 50256},
        Case{"cl100k_base", "tokenizers/tiktoken/cl100k_base.json", "tiktoken", 100277, none, 100257, none,
             "<|fim_middle|>", 100259},
        Case{"cl100k_base", "tokenizers/tiktoken/cl100k_base.tiktoken", "tiktoken", 100277, none, 100257, none,
             "<|fim_middle|>", 100259},
        Case{"o200k_base", "tokenizers/tiktoken/o200k_base.json", "tiktoken", 200019, none, 199999, none,
             "<|endofprompt|>", 200018},
        Case{"o200k_base", "tokenizers/tiktoken/o200k_base.tiktoken", "tiktoken", 200019, none, 199999, none,
             "<|endofprompt|>", 200018},
        Case{"llama3", "tokenizers/llama3/tokenizer.model", "tiktoken", 128256, 128000, 128001, none, "<|eot_id|>",
             128009},
        Case{"llama3", "tokenizers/llama3/tokenizer.json", "hf-tokenizer-json", 128256, 128000, 128001, none,
             "<|eot_id|>", 128009},
        Case{"llama3-hf", "tokenizers/llama3", "hf-tokenizer-json", 128256, 128000, 128001, none, "<|eot_id|>", 128009},
        Case{"mistral", "tokenizers/mistral/tokenizer.json", "hf-tokenizer-json", 32000, 1, 2, none, "</s>", 2},
        Case{"qwen3", "tokenizers/qwen3/tokenizer.json", "hf-tokenizer-json", 151669, none, 151645, 151643,
             "<|im_start|>", 151644},
        Case{"spm", "tokenizers/spm/sotu.model", "sentencepiece", 4000, 1, 2, none, "<s>", 1}),
    [](const testing::TestParamInfo<Case>& info) {
      return info.param.reference == "llama3-hf" ? "llama3_tokenizer_json_vs_lenml" : case_name(info);
    });

}  // namespace
}  // namespace hone::test
