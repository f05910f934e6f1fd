// The tokenizer parts on their own: UTF-8 repair, the regex translation, BPE
// against a naive implementation, special tokens, errors, threads, the CLI.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sentencepiece_trainer.h>
#include <thread>

#include "assets.hpp"
#include "fuzz/fuzz_input.hpp"
#include "hone/core/error.hpp"
#include "hone/core/files.hpp"
#include "hone/data/tokenizers/loaders.hpp"
#include "hone/data/tokenizers/split_regex.hpp"
#include "hone/data/tokenizers/tokenizer.hpp"
#include "hone/data/tokenizers/utf8.hpp"

namespace hone::test {
namespace {

namespace fs = std::filesystem;

std::string sanitized(std::string_view text) {
  std::string storage;
  return std::string(utf8::sanitize(text, storage));
}

TEST(TokenizerUtf8, ValidTextIsReturnedAsItIs) {
  const std::string text = "plain ASCII, caf\xC3\xA9, \xE4\xBD\xA0\xE5\xA5\xBD, \xF0\x9F\x98\x80";
  std::string storage;
  EXPECT_EQ(utf8::sanitize(text, storage).data(), text.data());
  EXPECT_TRUE(storage.empty());
}

// The WHATWG decoder's answers (what TextDecoder and Python's errors="replace" give).
TEST(TokenizerUtf8, InvalidSequencesBecomeReplacementCharacters) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(sanitized("a\x80z"), "a" + r + "z");
  EXPECT_EQ(sanitized("end\xC3"), "end" + r);
  EXPECT_EQ(sanitized("\xC0\x80"), r + r);                        // overlong: C0 is never a lead byte
  EXPECT_EQ(sanitized("\xE0\x80\x80"), r + r + r);                // overlong 3-byte
  EXPECT_EQ(sanitized("\xED\xA0\x80"), r + r + r);                // a surrogate
  EXPECT_EQ(sanitized("\xF4\x90\x80\x80"), r + r + r + r);        // above U+10FFFF
  EXPECT_EQ(sanitized("\xF0\x9F\x98x"), r + "x");                 // truncated: one U+FFFD
  EXPECT_EQ(sanitized("\xE2\x28\xA1"), r + "(" + r);              // the breaking byte is read again
  EXPECT_EQ(sanitized("\xF0\x28\x8C\xBC"), r + "(" + r + r);
  EXPECT_EQ(sanitized("ok\xF0\x9F\x98\x80\xFF"), "ok\xF0\x9F\x98\x80" + r);
}

TEST(TokenizerRegex, WhitespaceMeansUnicodeWhiteSpace) {
  const std::string ws = R"(\x{9}-\x{D}\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
  EXPECT_EQ(translate_pattern(R"(\s+(?!\S))"), "[" + ws + "]+(?![^" + ws + "])");
  EXPECT_EQ(translate_pattern(R"([^\s\p{L}])"), "[^" + ws + R"(\p{L}])");
  // An escaped backslash is no \s; a ']' first in a class is a literal.
  EXPECT_EQ(translate_pattern(R"(\\s[]\s])"), R"(\\s[])" + ws + "]");
  // U+0085 (NEL) is White_Space, U+180E is not (since Unicode 6.3).
  SplitRegex regex(R"(\s+|\S+)", "test");
  SplitRegex::Pieces pieces(regex, "a\xC2\x85\xC2\x85" "b\xE1\xA0\x8E" "c");
  std::vector<std::string> got;
  for (std::string_view p; pieces.next(p);) got.emplace_back(p);
  EXPECT_EQ(got, (std::vector<std::string>{"a", "\xC2\x85\xC2\x85", "b\xE1\xA0\x8E" "c"}));
}

// A run of ten million spaces (one odd document of a corpus) is split, not
// an error past PCRE2's default match limit that failed the whole job.
TEST(TokenizerRegex, AVeryLongRunOfSpacesIsSplit) {
  const auto cl100k = load_tokenizer(asset_path("tokenizers/tiktoken/cl100k_base.json"));
  const std::string text = "a" + std::string(10'000'000, ' ') + "b";
  EXPECT_EQ(cl100k->decode(cl100k->encode(text)), text);
}

TEST(TokenizerRegex, GapsBetweenMatchesArePieces) {
  SplitRegex regex(R"(\d+)", "test");
  SplitRegex::Pieces pieces(regex, "ab12cd345");
  std::vector<std::string> got;
  for (std::string_view p; pieces.next(p);) got.emplace_back(p);
  EXPECT_EQ(got, (std::vector<std::string>{"ab", "12", "cd", "345"}));
}

// tiktoken's algorithm written plainly: merge the adjacent pair whose concatenation
// has the lowest rank until none has one.
std::vector<int32_t> naive_tiktoken(const std::map<std::string, int32_t>& ranks, const std::string& piece) {
  if (const auto it = ranks.find(piece); it != ranks.end()) return {it->second};
  std::vector<std::string> parts;
  for (const char c : piece) parts.emplace_back(1, c);
  while (parts.size() > 1) {
    int32_t best = INT32_MAX;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const auto it = ranks.find(parts[i] + parts[i + 1]);
      if (it != ranks.end() && it->second < best) {
        best = it->second;
        at = i;
      }
    }
    if (best == INT32_MAX) break;
    parts[at] += parts[at + 1];
    parts.erase(parts.begin() + ptrdiff_t(at) + 1);
  }
  std::vector<int32_t> ids;
  for (const auto& p : parts) ids.push_back(ranks.at(p));
  return ids;
}

// Long pieces go through the heap-based merge, short ones through the scan; both
// must be the plain algorithm.
TEST(TokenizerBpe, LongAndShortPiecesMatchTheNaiveAlgorithm) {
  const auto t = load_tokenizer(asset_path("tokenizers/tiktoken/gpt2.json"));
  std::map<std::string, int32_t> ranks;
  for (int32_t id = 0; id < 50256; ++id) ranks[t->decode(std::vector<int32_t>{id})] = id;
  std::mt19937 rng(7);
  const std::string alphabet = "etaoinshrdlu";
  for (int trial = 0; trial < 60; ++trial) {
    std::string word = " ";
    const size_t length = 2 + rng() % (trial < 30 ? 60 : 400);
    for (size_t i = 0; i < length; ++i) word += alphabet[rng() % alphabet.size()];
    ASSERT_EQ(t->encode(word), naive_tiktoken(ranks, word)) << word;
  }
}

// cl100k_base has no token 100256 (its ranks end at 100255, its specials start at 100257).
TEST(Tokenizers, UnassignedIdsAreErrors) {
  const auto t = load_tokenizer(asset_path("tokenizers/tiktoken/cl100k_base.json"));
  EXPECT_EQ(t->decode(std::vector<int32_t>{100255, 100257}), " Conveyor<|endoftext|>");
  try {
    t->decode(std::vector<int32_t>{100256});
    ADD_FAILURE() << "decoded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 100256 is not assigned to any token"), std::string::npos) << e.what();
  }
}

TEST(Tokenizers, EncodeIsThreadSafe) {
  const auto t = load_tokenizer(asset_path("tokenizers/llama3/tokenizer.json"));
  const std::string text = read_file(asset_path("corpora/sotu/1941_franklin_d_roosevelt_d.txt"));
  const std::vector<int32_t> expected = t->encode(text);
  std::array<std::vector<int32_t>, 2> got;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i) threads.emplace_back([&, i] { got[i] = t->encode(text); });
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_TRUE(g == expected);
}

// The fuzz seeds are valid files of each format (so the fuzzer starts from inputs
// that reach encode and decode), and they tokenize as their vocabularies say; the
// other inputs there are regressions.
TEST(TokenizerFuzzSeeds, LoadAndTokenize) {
  const std::map<std::string, std::vector<int32_t>> hello_world = {
      {"ranks", {259, 264}},  // "hello" " world", the last two merges
      {"tiktoken_json", {259, 264}},
      {"gpt2", {259, 264}},
      {"tokenizer_json_byte_level", {259, 264}},
      {"tokenizer_json_spm_style", {79, 81, 70, 74}},  // "▁hello" "▁wor" "l" "d"
      {"nanogpt_meta", {19, 17, 22, 22, 25, 1, 32, 25, 27, 22, 16}},  // a character each
  };
  for (const auto& entry : fs::directory_iterator(source_path("tests/data/tokenizers/fuzz/seeds/tokenizer_files"))) {
    SCOPED_TRACE(entry.path().string());
    const std::string input = read_file(entry.path().string());
    if (!hello_world.count(entry.path().filename().string())) {
      // An input the fuzzer once found wrong: now a hone::Error, as any bad file.
      EXPECT_THROW(fuzz::load_fuzz_input(input), Error);
      continue;
    }
    const auto t = fuzz::load_fuzz_input(input);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->encode("hello world"), hello_world.at(entry.path().filename().string()));
    EXPECT_EQ(t->decode(t->encode("hello  world")), "hello  world");
  }
}

// Newer SentencePiece-style tokenizer.json files put spaces as U+2581 through a
// Metaspace pre-tokenizer instead of normalizers. Mistral's file rewritten that
// way tokenizes as before wherever the two agree by definition.
TEST(TokenizerJson, MetaspaceMatchesTheNormalizerForm) {
  const std::string dir = asset_path("tokenizers/mistral");
  const auto reference = load_tokenizer(dir);
  nlohmann::json j = nlohmann::json::parse(read_file(dir + "/tokenizer.json"));
  j["normalizer"] = nullptr;
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}, {"split", false}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}}}}};
  const auto variant = [&](const std::string& scheme, bool split) {
    j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", split}};
    return load_tokenizer_json(j.dump(), "metaspace.json");
  };
  // No leading space and no special tokens: the same pieces either way.
  const std::string speech = read_file(asset_path("corpora/sotu/1961_john_f_kennedy_d.txt"));
  const auto always = variant("always", false);
  EXPECT_TRUE(always->encode(speech) == reference->encode(speech));
  EXPECT_TRUE(always->decode(always->encode(speech)) == speech);
  // split cuts before every U+2581: the same wherever no token has two of them.
  EXPECT_TRUE(variant("always", true)->encode(speech) == reference->encode(speech));
  // "first" prepends only at the start of the input, not after a special token;
  // Metaspace (unlike Prepend) adds nothing where U+2581 is already first.
  const auto first = variant("first", false);
  const auto ids = [&](const Tokenizer& t, const std::string& text) { return t.encode(text, SpecialTokens::recognize); };
  EXPECT_EQ(ids(*first, "a</s>b"), (std::vector<int32_t>{ids(*first, "a")[0], 2, ids(*variant("never", false), "b")[0]}));
  EXPECT_EQ(ids(*always, "a</s>b"), (std::vector<int32_t>{ids(*always, "a")[0], 2, ids(*always, "b")[0]}));
  EXPECT_EQ(ids(*always, " b"), ids(*always, "b"));
  EXPECT_NE(ids(*reference, " b"), ids(*reference, "b"));
}

// Tokens added with normalized: true (transformers' add_tokens() default) match
// in the normalized text as their normalized content, as Hugging Face's added
// vocabulary matches them: under Mistral's Prepend + Replace normalizer "<tool>"
// is "▁<tool>" (taking the space before it, and not matching inside a word) and
// "hello world" is "▁hello▁world". The ids are Hugging Face tokenizers'.
TEST(TokenizerJson, NormalizedAddedTokensMatchTheirNormalizedContent) {
  nlohmann::json j = nlohmann::json::parse(read_file(asset_path("tokenizers/mistral") + "/tokenizer.json"));
  for (const auto& [content, id] : {std::pair<const char*, int>{"<tool>", 32000}, {"hello world", 32001}}) {
    j["added_tokens"].push_back({{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", true}, {"special", false}});
  }
  const auto t = load_tokenizer_json(j.dump(), "added.json");
  EXPECT_EQ(t->encode("a <tool> b"), (std::vector<int32_t>{264, 32000, 287}));
  EXPECT_EQ(t->encode("a<tool>b"), (std::vector<int32_t>{264, 28789, 6462, 28767, 28726}));
  EXPECT_EQ(t->encode("hello world"), (std::vector<int32_t>{32001}));
}

// Decoding as Hugging Face's decoder chain: a run of ByteFallback tokens that is
// no valid UTF-8 is a U+FFFD per token (all of the run's, valid characters in it
// too), a valid run its text; the decoder's Metaspace applies to added tokens
// (CodeLlama's "▁<PRE>" decodes to "<PRE>" at the start).
TEST(TokenizerJson, DecodingFollowsTheDecoderChain) {
  nlohmann::json j = nlohmann::json::parse(read_file(asset_path("tokenizers/mistral") + "/tokenizer.json"));
  const auto plain = load_tokenizer_json(j.dump(), "mistral.json");
  const auto byte = [](unsigned value) { return int32_t(3 + value); };  // <0x00> is id 3
  const std::string fffd = "\uFFFD";
  EXPECT_EQ(plain->decode(std::vector<int32_t>{byte(0xE5), byte(0x8F)}), fffd + fffd);
  EXPECT_EQ(plain->decode(std::vector<int32_t>{byte(0xA6), byte(0xF0), byte(0x9D), byte(0x94), byte(0xA0)}),
            fffd + fffd + fffd + fffd + fffd);
  EXPECT_EQ(plain->decode(std::vector<int32_t>{byte(0xE5), byte(0x8F), byte(0xA5)}), "\u53e5");  // 句
  j["added_tokens"].push_back({{"id", 32000}, {"content", "\u2581<PRE>"}, {"single_word", false}, {"lstrip", false},
                               {"rstrip", false}, {"normalized", false}, {"special", true}});
  const auto code = load_tokenizer_json(j.dump(), "codellama.json");
  EXPECT_EQ(code->decode(std::vector<int32_t>{32000, 22557}), "<PRE> Hello");
  // Without a decoder, Hugging Face joins the tokens with spaces (tokens.join(" ")).
  j["decoder"] = nullptr;
  const std::vector<int32_t> ids{1, 22557, 1526, byte(0x41)};
  EXPECT_EQ(load_tokenizer_json(j.dump(), "null_decoder.json")->decode(ids), "<s> \u2581Hello \u2581world <0x41>");
  j.erase("decoder");
  EXPECT_EQ(load_tokenizer_json(j.dump(), "no_decoder.json")->decode(ids), "<s> \u2581Hello \u2581world <0x41>");
}

// Llama 3's tiktoken tokenizer.model as a tokenizer.json: the vocabulary and
// merges of the one Meta publishes (made by transformers' converter), the same
// special tokens, and the same ids as the rank file for text and special tokens.
TEST(TokenizerJson, TiktokenRanksConvertToTheTokenizerJsonTransformersMakes) {
  const std::string dir = asset_path("tokenizers/llama3");
  const HfTokenizerFiles converted =
      tiktoken_as_hf_tokenizer(read_file(dir + "/tokenizer.model"), dir + "/tokenizer.model", {}, 8192);
  const nlohmann::json published = nlohmann::json::parse(read_file(dir + "/tokenizer.json"));
  EXPECT_TRUE(converted.tokenizer["model"]["vocab"] == published["model"]["vocab"]);
  EXPECT_TRUE(converted.tokenizer["model"]["merges"] == published["model"]["merges"]);
  EXPECT_EQ(converted.tokenizer["model"]["merges"].size(), 280147u);
  EXPECT_EQ(converted.tokenizer["pre_tokenizer"], published["pre_tokenizer"]);
  EXPECT_EQ(converted.tokenizer["added_tokens"], published["added_tokens"]);
  EXPECT_EQ(converted.config["bos_token"], "<|begin_of_text|>");
  EXPECT_EQ(converted.config["eos_token"], "<|end_of_text|>");
  EXPECT_EQ(converted.config["model_max_length"], 8192);
  // Read back: the ids of the rank file, BOS included where the post-processor adds it.
  const auto json = load_tokenizer_json(converted.tokenizer.dump(), "converted/tokenizer.json",
                                        converted.config.dump());
  const auto ranks = load_tokenizer(dir + "/tokenizer.model");
  const std::string speech = read_file(asset_path("corpora/sotu/1961_john_f_kennedy_d.txt")) +
                             " 12345 naïve ünïcode 日本語\r\n\t<|eot_id|>  <|start_header_id|>x";
  for (const SpecialTokens special : {SpecialTokens::as_text, SpecialTokens::recognize}) {
    EXPECT_TRUE(json->encode(speech, special) == ranks->encode(speech, special));
  }
  EXPECT_EQ(json->bos_id(), 128000);
  EXPECT_EQ(json->eos_id(), 128001);
}

// ---- errors: one message naming the file, where in it, and what was expected ----

class TokenizerFiles : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("hone_tok_{}_{}", getpid(),
                                                   testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& content) {
    fs::create_directories((dir_ / name).parent_path());
    std::ofstream(dir_ / name, std::ios::binary) << content;
    return (dir_ / name).string();
  }
  // The error message of loading `path`, checked to name it.
  std::string error_of(const std::string& path) {
    try {
      load_tokenizer(path);
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(path), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      return message;
    }
    ADD_FAILURE() << path << " loaded";
    return "";
  }
  fs::path dir_;
};

TEST_F(TokenizerFiles, WrongKindOfFile) {
  const std::string m = error_of(write("notes.txt", "hello world\nsecond line\n"));
  EXPECT_NE(m.find(":1: not a tokenizer file"), std::string::npos) << m;
  EXPECT_NE(m.find("expected"), std::string::npos) << m;
  EXPECT_NE(error_of(write("empty.model", "")).find("empty file"), std::string::npos);
  EXPECT_NE(error_of(write("config.json", R"({"hidden_size": 5})")).find("no tokenizer"), std::string::npos);
  EXPECT_NE(error_of(write("bad.model", std::string("\x0A\x05garbage and more", 18))).find("not a SentencePiece model"),
            std::string::npos);
  EXPECT_NE(error_of((dir_ / "missing.json").string()).find("no such file"), std::string::npos);
  fs::create_directories(dir_ / "empty_dir");
  EXPECT_NE(error_of((dir_ / "empty_dir").string()).find("no tokenizer in this folder"), std::string::npos);
}

// nanoGPT's character vocabulary (tests/reference/generate_nanogpt_chars.py runs
// its prepare.py): each character one token, as its encode() gives them, from the
// default protocol's pickle and protocol 2's; the folder holding it is found.
TEST_F(TokenizerFiles, NanoGptsCharacterVocabulary) {
  const std::string dir = source_path("tests/reference/nanogpt_chars");
  const nlohmann::json expected = nlohmann::json::parse(read_file(dir + "/expected.json"));
  for (const char* file : {"meta.pkl", "meta_protocol2.pkl"}) {
    SCOPED_TRACE(file);
    const auto t = load_tokenizer(dir + "/" + file);
    EXPECT_EQ(t->kind(), "nanogpt-chars");
    EXPECT_EQ(t->vocab_size(), expected["vocab_size"].get<int32_t>());
    const std::string text = expected["text"];
    EXPECT_EQ(t->encode(text), expected["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(t->decode(t->encode(text)), text);
    EXPECT_FALSE(t->bos_id() || t->eos_id());
  }
  EXPECT_EQ(tokenizer_files_in(dir), std::vector<fs::path>{fs::path(dir) / "meta.pkl"});
  EXPECT_EQ(load_tokenizer(dir)->kind(), "nanogpt-chars");
  // A character the text never had is an error, as nanoGPT's KeyError, written escaped; so is text that is
  // not UTF-8, which nanoGPT's strict decoder refuses.
  const auto characters = load_tokenizer(dir + "/meta.pkl");
  EXPECT_EQ(hone::test::error_of([&] { characters->encode("a!"); }),
            dir + "/meta.pkl: the character U+0021 (\"!\") is not in this character vocabulary");
  EXPECT_EQ(hone::test::error_of([&] { characters->encode(std::string("a\0b", 3)); }),
            dir + "/meta.pkl: the character U+0000 (\"\\x00\") is not in this character vocabulary");
  EXPECT_EQ(hone::test::error_of([&] { characters->encode("ab\xff"); }),
            dir + "/meta.pkl: the text is not UTF-8 at byte 2 (0xFF): a character vocabulary takes characters");
  // A pickle that calls anything is refused unrun; one of another shape is named.
  const std::string calls =
      write("calls.pkl", std::string("\x80\x02" "cposix\nsystem\n" "X\x02\x00\x00\x00" "ls\x85R.", 26));
  EXPECT_NE(error_of(calls).find("calls.pkl (offset 24): the pickle calls posix.system: hone reads plain data"),
            std::string::npos)
      << error_of(calls);
  // Protocol 0 (no PROTO), and a stoi without a character of itos.
  EXPECT_NE(error_of(write("p0.pkl", "(dp0\nVa\np1\nI0\ns.")).find("a pickle of protocol 0 or 1"), std::string::npos);
  // {"itos": {0: "a", 1: "b"}, "stoi": {"a": 0}}
  const std::string half = write("half.pkl", std::string("\200\002}(X\004\000\000\000itos}(K\000X\001\000\000\000aK\001X"
                                                       "\001\000\000\000buX\004\000\000\000stoi}X\001\000\000\000aK\000su.",
                                                       53));
  EXPECT_NE(error_of(half).find("half.pkl: stoi and itos hold 1 and 2 characters: each character is in both"),
            std::string::npos)
      << error_of(half);
  // An entry of two characters, an id past any vocabulary (2**63 - 1).
  const std::string two = write("two.pkl", std::string("\200\002}q\000X\004\000\000\000itosq\001}q\002K\000X\002\000\000\000"
                                                     "abq\003ss.",
                                                     33));
  EXPECT_NE(error_of(two).find("two.pkl: itos[0] = \"ab\" is not one character for a token id"), std::string::npos)
      << error_of(two);
  const std::string far = write("far.pkl", std::string("\200\002}q\000X\004\000\000\000itosq\001}q\002\212\010\377\377\377"
                                                     "\377\377\377\377\177X\001\000\000\000aq\003ss.",
                                                     40));
  EXPECT_NE(error_of(far).find("far.pkl: itos[9223372036854775807] = \"a\" is not one character for a token id"),
            std::string::npos)
      << error_of(far);
  const std::string list = write("list.pkl", std::string("\x80\x02]q\x00.", 6));
  EXPECT_NE(error_of(list).find("list.pkl: a pickle without nanoGPT's character vocabulary"), std::string::npos)
      << error_of(list);
}

TEST_F(TokenizerFiles, RankFileNamesTheLine) {
  const std::string m = error_of(write("cl100k_base.tiktoken", "IQ== 0\nIg== 1\nnot-base64 2\n"));
  EXPECT_NE(m.find("cl100k_base.tiktoken:3: expected a tiktoken rank line"), std::string::npos) << m;
  EXPECT_NE(error_of(write("r.tiktoken", "IQ== 0\nIQ== 1\n")).find(":2: token IQ== or rank 1 appears twice"), std::string::npos);
  EXPECT_NE(error_of(write("s.tiktoken", "IQ== 0\nIg== 0\n")).find(":2: token Ig== or rank 0 appears twice"),
            std::string::npos);
  // Well formed, but not an encoding hone knows the pattern of.
  EXPECT_NE(error_of(write("x.tiktoken", "IQ== 0\nIg== 1\n")).find("cannot tell which tiktoken encoding"),
            std::string::npos);
  // The file's name tells, not its folder's (a Llama 3 tokenizer.model under o200k_tests/ was read as o200k).
  EXPECT_NE(error_of(write("o200k_tests/x.tiktoken", "IQ== 0\nIg== 1\n")).find("cannot tell which tiktoken encoding"),
            std::string::npos);
}

// libsentencepiece follows a model's normalization trie and reads its
// replacement texts without checking where they point: damaged ones crashed it.
TEST_F(TokenizerFiles, ADamagedSentencePieceCharsmapIsNamedNotACrash) {
  std::string corpus;
  for (int i = 0; i < 200; ++i)
    corpus += fmt::format("line {} of the quick brown fox, and the lazy dog {}\n", i, i * 7);
  const std::string prefix = (dir_ / "spm" / "nfkc").string();
  ASSERT_TRUE(sentencepiece::SentencePieceTrainer::Train(fmt::format(
                  "--input={} --model_prefix={} --vocab_size=60 --minloglevel=2", write("spm/corpus.txt", corpus),
                  prefix))
                  .ok());
  const std::string model = read_file(prefix + ".model");
  // NFKC (the default rules): full-width letters read as ASCII ones.
  const auto tokenizer = load_tokenizer(write("good.model", model));
  EXPECT_EQ(tokenizer->encode("\xEF\xBD\x86ox", SpecialTokens::as_text),
            tokenizer->encode("fox", SpecialTokens::as_text));
  const std::string_view charsmap = sentencepiece_charsmap(model, 3);
  ASSERT_GT(charsmap.size(), 8u);
  const size_t at = size_t(charsmap.data() - model.data());
  uint32_t trie_bytes;
  std::memcpy(&trie_bytes, charsmap.data(), 4);
  // The trie's root sent past its end.
  std::string damaged = model;
  const uint32_t far = 0xFFFFFC00u;
  std::memcpy(damaged.data() + at + 4, &far, 4);
  EXPECT_EQ(error_of(write("root.model", damaged)),
            fmt::format("{}: the normalizer_spec's precompiled_charsmap is damaged: unit 0 points past the trie's {} "
                        "units (SentencePiece would read outside it)",
                        (dir_ / "root.model").string(), trie_bytes / 4));
  // A trie size past the end by fewer than the 4 bytes that give it, which SentencePiece takes.
  damaged = model;
  const uint32_t past = uint32_t(charsmap.size()) - 2;
  std::memcpy(damaged.data() + at, &past, 4);
  EXPECT_NE(error_of(write("size.model", damaged))
                .find(fmt::format("its trie of {} bytes runs past the {} bytes after its size", past,
                                  charsmap.size() - 4)),
            std::string::npos);
  // Replacement texts without the NUL that ends each.
  damaged = model;
  std::fill(damaged.begin() + long(at + 4 + trie_bytes), damaged.begin() + long(at + charsmap.size()), 'x');
  EXPECT_NE(error_of(write("texts.model", damaged))
                .find(fmt::format("runs past the {} bytes of replacements", charsmap.size() - 4 - trie_bytes)),
            std::string::npos);
}

TEST_F(TokenizerFiles, JsonNamesTheByteOffsetOrKey) {
  std::string m = error_of(write("a/tokenizer.json", R"({"model": {"type": "BPE",, "vocab": {}}})"));
  EXPECT_NE(m.find("tokenizer.json: not valid JSON (byte 26: parse error at line 1, column 26: "), std::string::npos)
      << m;
  m = error_of(write("b/tokenizer.json", R"({"model": {"type": "Unigram", "vocab": []}})"));
  EXPECT_NE(m.find("key model.type: unsupported value \"Unigram\" (expected \"BPE\")"), std::string::npos) << m;
  m = error_of(write("c/tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a c"]}})"));
  EXPECT_NE(m.find("key model.merges[0]: \"c\" is not in model.vocab"), std::string::npos) << m;
  m = error_of(write("d/tokenizer.json",
                     R"({"normalizer": {"type": "NFKC"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})"));
  EXPECT_NE(m.find("key normalizer.type: unsupported value \"NFKC\""), std::string::npos) << m;
  m = error_of(write("e/cl100k_base.json", R"({"pat_str": "x", "special_tokens": {}, "bpe_ranks": "! 0 IQ== ???"})"));
  EXPECT_NE(m.find("bpe_ranks line 1, byte 9: expected a base64 token"), std::string::npos) << m;
}

TEST_F(TokenizerFiles, Gpt2FilesNameTheLineAndTheirPartner) {
  const std::string vocab = write("encoder.json", R"({"a": 0, "b": 1, "ab": 2})");
  EXPECT_NE(error_of(vocab).find("needs vocab.bpe or merges.txt in the same folder"), std::string::npos);
  const std::string merges = write("vocab.bpe", "#version: 0.2\na b\na c\n");
  const std::string m = error_of(merges);
  EXPECT_NE(m.find("vocab.bpe:3: merge \"a c\": c is not in"), std::string::npos) << m;
}

// ---- the CLI ----

struct CliResult {
  int status;
  std::string output;
};

CliResult run_hone(const std::string& args) {
  const std::string command = std::string(HONE_BINARY_DIR) + "/bin/hone " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

TEST(TokenizeCli, TokenizeAndDecode) {
  const std::string gpt2 = asset_path("tokenizers/gpt2");
  CliResult r = run_hone("tokenize --tokenizer " + gpt2 + " --text 'Hello world<|endoftext|>'");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.output, "[15496, 995, 27, 91, 437, 1659, 5239, 91, 29]\n");
  r = run_hone("tokenize --special --tokenizer " + gpt2 + " --text 'Hello world<|endoftext|>'");
  EXPECT_EQ(r.output, "[15496, 995, 50256]\n");
  r = run_hone("tokenize --decode --tokenizer " + gpt2 + " --text '[15496, 995, 50256]'");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.output, "Hello world<|endoftext|>");
}

TEST(TokenizeCli, BadInputExitsTwoWithOneLine) {
  const std::string readme = source_path("README.md");
  CliResult r = run_hone("tokenize --tokenizer " + readme + " --text hi");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_NE(r.output.find(readme + ":1: not a tokenizer file"), std::string::npos) << r.output;
  r = run_hone("tokenize --decode --tokenizer " + asset_path("tokenizers/gpt2") + " --text '[1, 99999999]'");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("token id 99999999 is outside the vocabulary"), std::string::npos) << r.output;
  // A folder as the text's file (it opens, and read as nothing).
  const std::string folder = source_path("docs");
  r = run_hone("tokenize --tokenizer " + asset_path("tokenizers/gpt2") + " --file " + folder);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.output, "hone: error: " + folder + ": a folder, not a file\n");
}

}  // namespace
}  // namespace hone::test
