// Id-for-id agreement with the reference implementations (reference/*.json, written
// by reference/generate.mjs), and decode(encode(x)) == x.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

#include <nlohmann/json.hpp>

#include "assets.hpp"
#include "hone/data/tokenizers/loaders.hpp"
#include "hone/data/tokenizers/tokenizer.hpp"
#include "hone/data/tokenizers/utf8.hpp"

namespace hone::test {
namespace {

using nlohmann::json;

struct Case {
  std::string reference;  // reference/<name>.json
  std::string tokenizer;  // under the asset cache
};

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
  json reference_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_P(Reference, TextsIdForId) {
  const std::string mode = reference_["mode"];
  for (const auto& [name, entry] : reference_["texts"].items()) {
    const std::vector<int32_t> expected = entry["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> actual = encode(*tokenizer_, entry_text(entry), mode, entry.value("special", false));
    EXPECT_TRUE(actual == expected) << name << ": " << first_difference(*tokenizer_, actual, expected);
  }
}

TEST_P(Reference, WholeCorporaIdForId) {
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

// decode(encode(x)) gives back x after what the format's normalization does to
// it: invalid UTF-8 becomes U+FFFD, SentencePiece-style formats write spaces as
// U+2581 (so U+2581 comes back as a space), tokenizer.json normalizers apply.
// Not for special tokens in SentencePiece-style text: each stretch between them
// gets its own leading U+2581 there, by design.
TEST_P(Reference, DecodeInvertsEncode) {
  const bool spm_style = tokenizer_->kind() == "sentencepiece" || GetParam().reference == "mistral";
  const bool normalizes_nfc = GetParam().reference == "qwen3";
  for (const auto& [name, entry] : reference_["texts"].items()) {
    std::string storage;
    std::string text(utf8::sanitize(entry_text(entry), storage));
    const bool special = entry.value("special", false);
    if (special && spm_style) continue;
    const std::string decoded =
        tokenizer_->decode(tokenizer_->encode(text, special ? SpecialTokens::recognize : SpecialTokens::as_text));
    if (spm_style) {
      for (size_t p; (p = text.find("\u2581")) != std::string::npos;) text.replace(p, 3, " ");
    }
    if (normalizes_nfc) text = nfc(text);
    EXPECT_EQ(decoded, text) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, Reference,
                         testing::Values(Case{"gpt2", "tokenizers/gpt2"}, Case{"gpt2", "tokenizers/gpt2-hf"},
                                         Case{"gpt2", "tokenizers/tiktoken/gpt2.json"},
                                         Case{"cl100k_base", "tokenizers/tiktoken/cl100k_base.json"},
                                         Case{"o200k_base", "tokenizers/tiktoken/o200k_base.json"},
                                         Case{"llama3", "tokenizers/llama3/tokenizer.model"},
                                         Case{"llama3", "tokenizers/llama3/tokenizer.json"},
                                         Case{"llama3-hf", "tokenizers/llama3/tokenizer.json"},
                                         Case{"mistral", "tokenizers/mistral/tokenizer.json"},
                                         Case{"qwen3", "tokenizers/qwen3/tokenizer.json"},
                                         Case{"spm", "tokenizers/spm/sotu.model"}),
                         [](const testing::TestParamInfo<Case>& info) {
                           return info.param.reference == "llama3-hf" ? "llama3_tokenizer_json_vs_lenml"
                                                                      : case_name(info);
                         });

}  // namespace
}  // namespace hone::test
