// hone preprocess: the library with small tokenizers written by the tests, and the
// binary as Megatron data scripts run it (flags, exit status 2 with one line,
// nothing left behind, the same bytes for any --workers, interrupted runs). The
// Assets tests use the real GPT-2, SentencePiece and tiktoken files of
// scripts/fetch-assets.sh.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include "assets.hpp"
#include "formats_test.hpp"
#include "hone/data/formats/mds.hpp"
#include "hone/data/formats/megatron.hpp"
#include "hone/data/preprocess.hpp"
#include "hone/core/files.hpp"
#include "hone/data/tokenizers/loaders.hpp"
#include "support/mds_fixture.hpp"

extern char** environ;

namespace hone::test {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

// ---- tokenizers written by the tests ----

// The character of GPT-2's byte-level alphabet that stands for byte b.
std::string byte_char(int b) {
  static const std::array<int, 256> code_points = [] {
    std::array<int, 256> cp{};
    int shifted = 0;
    for (int i = 0; i < 256; ++i) {
      const bool printable = (i >= 33 && i <= 126) || (i >= 161 && i <= 172) || i >= 174;
      cp[size_t(i)] = printable ? i : 256 + shifted++;
    }
    return cp;
  }();
  const int cp = code_points[size_t(b)];
  if (cp < 0x80) return std::string(1, char(cp));
  return {char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
}

struct TinySpec {
  json post_processor = nullptr;
  std::vector<std::pair<std::string, int>> added{{"<|endoftext|>", 260}};
  std::optional<json> config;  // tokenizer_config.json
};

// A byte-level BPE tokenizer.json: ids 0..255 are the bytes, four merges make "he"
// (256), "ll" (257), " t" (258) and " the" (259); <|endoftext|> is 260.
std::string write_tokenizer(const std::string& dir, const TinySpec& spec = {}) {
  fs::create_directories(dir);
  const std::string space = byte_char(' ');
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  vocab["he"] = 256;
  vocab["ll"] = 257;
  vocab[space + "t"] = 258;
  vocab[space + "the"] = 259;
  json added = json::array();
  for (const auto& [content, id] : spec.added)
    added.push_back({{"id", id}, {"content", content}, {"normalized", false}, {"special", true}});
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  const json j = {{"version", "1.0"},
                  {"added_tokens", added},
                  {"normalizer", nullptr},
                  {"pre_tokenizer", byte_level},
                  {"post_processor", spec.post_processor},
                  {"decoder", byte_level},
                  {"model",
                   {{"type", "BPE"},
                    {"vocab", vocab},
                    {"merges", {"h e", "l l", space + " t", space + "t he"}}}}};
  write_text(dir + "/tokenizer.json", j.dump());
  if (spec.config) write_text(dir + "/tokenizer_config.json", spec.config->dump());
  return dir;
}

data::PreprocessTokenizer hf_tokenizer(const std::string& dir) {
  return data::load_preprocess_tokenizer({"HuggingFaceTokenizer", "", "", dir});
}

// ---- reading outputs back ----

struct Document {
  Ids tokens;
  std::vector<size_t> sequences;  // lengths
};

std::vector<Document> read_megatron(const std::string& prefix) {
  data::MegatronDataset dataset(prefix);
  std::vector<Document> out(dataset.document_count());
  for (uint64_t d = 0; d < out.size(); ++d) {
    const auto [first, last] = dataset.document_sequences(d);
    for (uint64_t s = first; s < last; ++s) {
      const Ids t = dataset.tokens(s);
      out[d].tokens.insert(out[d].tokens.end(), t.begin(), t.end());
      out[d].sequences.push_back(t.size());
    }
  }
  return out;
}

std::vector<Ids> tokens_of(const std::vector<Document>& documents) {
  std::vector<Ids> out;
  for (const Document& d : documents) out.push_back(d.tokens);
  return out;
}

std::vector<Ids> read_mds(const std::string& dir) {
  data::MdsDataset dataset(dir);
  std::vector<Ids> out;
  for (uint64_t i = 0; i < dataset.size(); ++i) out.push_back(dataset.tokens(i));
  return out;
}

// What Megatron writes for a text: the tokenizer's ids, then EOD unless empty.
Ids expected(const data::PreprocessTokenizer& t, const std::string& text, bool append_eod = true) {
  Ids ids;
  t.encode(text, ids);
  if (append_eod && !ids.empty()) ids.push_back(*t.eod);
  return ids;
}

std::string jsonl(const std::vector<json>& lines) {
  std::string out;
  for (const json& line : lines) out += line.dump() + "\n";
  return out;
}

void write_gzip(const std::string& path, const std::string& text) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_EQ(gzwrite(f, text.data(), unsigned(text.size())), int(text.size()));
  gzclose(f);
}

void write_zstd(const std::string& path, const std::string& text) {
  std::vector<uint8_t> buffer(ZSTD_compressBound(text.size()));
  const size_t n = ZSTD_compress(buffer.data(), buffer.size(), text.data(), text.size(), 3);
  ASSERT_FALSE(ZSTD_isError(n));
  buffer.resize(n);
  write_bytes(path, buffer);
}

// Documents of random lengths (some empty) over a mix of ASCII, "the", UTF-8 and
// special-token text, as JSONL with keys text and title.
std::string random_corpus(size_t documents, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::vector<std::string> words = {"the", " the", "hello", " world", "ll", "\n", "  ", "caf\u00e9",
                                          " \u4e16\u754c", "<|endoftext|>", "!", " 42", "he", "\t"};
  std::vector<json> lines;
  for (size_t i = 0; i < documents; ++i) {
    std::string text, title;
    const size_t n = rng() % 9 == 0 ? 0 : rng() % 120;
    for (size_t w = 0; w < n; ++w) text += words[rng() % words.size()];
    for (size_t w = 0; w < 3; ++w) title += words[rng() % words.size()];
    lines.push_back({{"id", i}, {"text", text}, {"title", title}});
  }
  return jsonl(lines);
}

// ---- the binary ----

struct HoneRun {
  int status = -1;
  std::string out, err;
};

std::string hone_binary() { return std::string(HONE_BINARY_DIR) + "/bin/hone"; }

HoneRun run_hone(const std::string& args, const std::string& err_path) {
  HoneRun r;
  FILE* pipe = popen((hone_binary() + " " + args + " 2>" + err_path).c_str(), "r");
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) r.out.append(buffer.data(), n);
  const int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.err = read_file(err_path);
  fs::remove(err_path);
  return r;
}

class Preprocess : public FormatsTest {
 protected:
  HoneRun hone(const std::string& args) { return run_hone(args, (fs::temp_directory_path() / "hone_pp_stderr").string() +
                                                               std::to_string(::getpid())); }

  // Runs `args`, which must fail with status 2 and one line holding every fragment,
  // and leave the folder as it was.
  void expect_user_error(const std::string& args, std::initializer_list<std::string> fragments) {
    SCOPED_TRACE(args);
    const std::vector<std::string> before = listing();
    const HoneRun r = hone(args);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    for (const std::string& f : fragments) EXPECT_NE(r.err.find(f), std::string::npos) << "missing '" << f << "' in " << r.err;
    EXPECT_EQ(listing(), before) << "an error must leave nothing behind";
  }

  // Options reading a random corpus (of `seed`) with EOD appended, and the
  // documents they write as Megatron files (prefix "mega").
  std::pair<data::PreprocessOptions, std::vector<Ids>> corpus_documents(const data::PreprocessTokenizer& t,
                                                                        uint64_t seed) {
    write_text(path("in.jsonl"), random_corpus(300, seed));
    data::PreprocessOptions o;
    o.inputs = {path("in.jsonl")};
    o.output_prefix = path("mega");
    o.append_eod = true;
    data::preprocess(o, t);
    return {o, tokens_of(read_megatron(path("mega_text_document")))};
  }
};

// ---- library ----

TEST(SplitSentences, PlainRule) {
  using V = std::vector<std::string_view>;
  const std::string text = "Hello there. How are you?  Fine!\nHe said \"Stop.\" Then 3.14 and e.g.x left...  \n";
  EXPECT_EQ(data::split_sentences(text, false),
            (V{"Hello there.", "How are you?", "Fine!", "He said \"Stop.\"", "Then 3.14 and e.g.x left..."}));
  EXPECT_EQ(data::split_sentences(text, true),
            (V{"Hello there. ", "How are you?  ", "Fine!\n", "He said \"Stop.\" ", "Then 3.14 and e.g.x left..."}));
  EXPECT_EQ(data::split_sentences("  no end", false), (V{"  no end"}));
  EXPECT_EQ(data::split_sentences(" \n\t", true), V{});
  EXPECT_EQ(data::split_sentences("", false), V{});
}

TEST(ParseSize, StreamingStrings) {
  EXPECT_EQ(data::parse_size("67108864", "--mds-size-limit"), 67108864u);
  EXPECT_EQ(data::parse_size("64mb", "--mds-size-limit"), uint64_t(1) << 26);
  EXPECT_EQ(data::parse_size("1.5KB", "--mds-size-limit"), 1536u);
  EXPECT_EQ(data::parse_size("0", "--mds-size-limit"), 0u);
  // nccl-tests' -b and -e: 128M, 256K, 1G.
  EXPECT_EQ(data::parse_size("128M", "--max-bytes"), uint64_t(1) << 27);
  EXPECT_EQ(data::parse_size("256K", "--max-bytes"), uint64_t(1) << 18);
  EXPECT_EQ(data::parse_size("1G", "--max-bytes"), uint64_t(1) << 30);
  for (const char* bad : {"", "mb", "12xb", "-1", "1e30gb", "5x", "64bb"})
    expect_error([&] { data::parse_size(bad, "--mds-size-limit"); }, {"--mds-size-limit", "64mb"});
}

TEST_F(Preprocess, JsonlRoundTripWithSeveralKeys) {
  const auto t = hf_tokenizer(write_tokenizer(path("tok")));
  ASSERT_EQ(t.eod, 260);
  write_text(path("in.jsonl"), jsonl({{{"text", "hello the world"}, {"title", "the hell"}},
                                      {{"text", ""}, {"title", "x"}},
                                      {{"text", "a <|endoftext|> b"}, {"title", "\u00e9t\u00e9 \u4e16"}}}) +
                                   "\n");  // a blank line is skipped
  data::PreprocessOptions o;
  o.inputs = {path("in.jsonl")};
  o.json_keys = {"text", "title"};
  o.output_prefix = path("out");
  o.append_eod = true;
  const auto r = data::preprocess(o, t);
  EXPECT_EQ(r.outputs, (std::vector<std::string>{path("out_text_document"), path("out_title_document")}));
  EXPECT_EQ(r.documents, 3u);
  EXPECT_EQ(r.bytes, 15u + 8u + 0u + 1u + 17u + 9u);  // the UTF-8 bytes of the values

  const auto text = read_megatron(path("out_text_document"));
  ASSERT_EQ(text.size(), 3u);
  // " the" is one merged token; the special token written in the text becomes its id.
  EXPECT_EQ(text[0].tokens, (Ids{256, 257, 'o', 259, ' ', 'w', 'o', 'r', 'l', 'd', 260}));
  EXPECT_EQ(text[0].tokens, expected(t, "hello the world"));
  EXPECT_TRUE(text[1].tokens.empty()) << "an empty text is an empty document, without EOD, as in Megatron";
  EXPECT_TRUE(text[1].sequences.empty());
  EXPECT_EQ(text[2].tokens, (Ids{'a', ' ', 260, ' ', 'b', 260}));
  const auto title = read_megatron(path("out_title_document"));
  EXPECT_EQ(tokens_of(title), (std::vector<Ids>{expected(t, "the hell"), expected(t, "x"), expected(t, "\u00e9t\u00e9 \u4e16")}));
  EXPECT_EQ(r.tokens, 11u + 0u + 6u + title[0].tokens.size() + 2u + title[2].tokens.size());
  EXPECT_EQ(data::MegatronDataset(path("out_text_document")).dtype(), data::MegatronDType::u16);
}

TEST_F(Preprocess, TextFilesFoldersGlobsAndCompressedInputs) {
  const auto t = hf_tokenizer(write_tokenizer(path("tok")));
  fs::create_directories(path("in/sub"));
  write_text(path("in/a.txt"), "the first file\n");
  write_gzip(path("in/b.jsonl.gz"), jsonl({{{"text", "gzip one"}}, {{"text", "gzip two"}}}));
  write_zstd(path("in/c.jsonl.zst"), jsonl({{{"text", "zstd line"}}}));
  write_zstd(path("in/sub/d.txt.zst"), "compressed text file");
  write_text(path("in/.hidden.txt"), "never read");
  fs::create_directories(path("more"));
  write_text(path("more/a.txt"), "the first file\n");
  data::PreprocessOptions o;
  o.inputs = {path("in"), path("more/a*.txt")};  // a folder, then a pattern
  o.output_prefix = path("out");
  const auto r = data::preprocess(o, t);
  EXPECT_EQ(r.files, 5u);
  EXPECT_EQ(tokens_of(read_megatron(path("out_text_document"))),
            (std::vector<Ids>{expected(t, "the first file\n", false), expected(t, "gzip one", false),
                              expected(t, "gzip two", false), expected(t, "zstd line", false),
                              expected(t, "compressed text file", false), expected(t, "the first file\n", false)}));
  o.inputs = {path("in/*.csv")};
  expect_error([&] { data::preprocess(o, t); }, {path("in/*.csv"), "no file or folder matches"});
  // A file named twice would be read twice.
  o.inputs = {path("in"), path("in/a*.txt")};
  expect_error([&] { data::preprocess(o, t); },
               {path("in/a.txt") + ": named twice (by " + path("in") + ", and by " + path("in/a*.txt") +
                "): each file is read once"});
  o.inputs = {path("in/a.txt"), path("in/../in/a.txt")};
  expect_error([&] { data::preprocess(o, t); },
               {path("in/../in/a.txt") + ": named twice (by " + path("in/a.txt") + ", and by " +
                path("in/../in/a.txt") + "): each file is read once"});
  o.inputs = {path("in")};
  o.json_keys = {"text", "title"};
  expect_error([&] { data::preprocess(o, t); }, {path("in/a.txt"), "one field", "2 JSON keys"});
  // A text file whose lines are JSON records would be one document of JSON syntax; bytes that
  // are not UTF-8 stop the run, as Megatron's reading as UTF-8 does.
  write_text(path("records.txt"), jsonl({{{"content", "a record"}}}));
  o.inputs = {path("records.txt")};
  o.json_keys = {"content"};
  expect_error([&] { data::preprocess(o, t); }, {path("records.txt"), "first line is a JSON object", ".jsonl"});
  write_text(path("latin1.txt"), "caf\xe9 au lait");
  o.inputs = {path("latin1.txt")};
  o.json_keys = {"text"};
  expect_error([&] { data::preprocess(o, t); }, {path("latin1.txt"), "byte 3 is not UTF-8 (0xe9)"});
}

// Megatron's HuggingFaceTokenizer encodes with transformers' tokenizer(text).input_ids,
// which adds what tokenizer.json's post-processor says (Llama's BOS, RoBERTa's <s> </s>).
TEST_F(Preprocess, HuggingFacePostProcessorTemplate) {
  const json bos = {{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}};
  const json text = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
  const json llama = {{"type", "TemplateProcessing"},
                      {"single", {bos, text}},
                      {"pair", {bos, text, bos, text}},
                      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {261}}, {"tokens", {"<s>"}}}}}}};
  const json sequence = {{"type", "Sequence"},
                         {"processors", {{{"type", "ByteLevel"}, {"trim_offsets", false}}, llama}}};
  const json roberta = {{"type", "RobertaProcessing"}, {"sep", {"</s>", 262}}, {"cls", {"<s>", 261}}};
  const auto spec = [](const json& post) {
    return TinySpec{post, {{"<|endoftext|>", 260}, {"<s>", 261}, {"</s>", 262}}, json{{"bos_token", "<s>"}, {"eos_token", "</s>"}}};
  };
  const Ids hello = {256, 257, 'o'};
  for (const auto& [name, post, before, after] :
       {std::tuple{"llama", llama, Ids{261}, Ids{}}, std::tuple{"sequence", sequence, Ids{261}, Ids{}},
        std::tuple{"roberta", roberta, Ids{261}, Ids{262}}}) {
    SCOPED_TRACE(name);
    const auto t = hf_tokenizer(write_tokenizer(path(name), spec(post)));
    EXPECT_EQ(t.before, before);
    EXPECT_EQ(t.after, after);
    ASSERT_EQ(t.eod, 262) << "EOD is the tokenizer's EOS";
    Ids want = before;
    want.insert(want.end(), hello.begin(), hello.end());
    want.insert(want.end(), after.begin(), after.end());
    want.push_back(262);
    EXPECT_EQ(expected(t, "hello"), want);
  }
  // transformers' Llama tokenizer classes (Mistral's files) rebuild it from
  // tokenizer_config.json's add_bos_token (default true) and add_eos_token (default false).
  for (const auto& [name, add_bos, add_eos, before, after] :
       {std::tuple{"no_bos", json(false), json(true), Ids{}, Ids{262}},
        std::tuple{"both", json(true), json(true), Ids{261}, Ids{262}},
        std::tuple{"neither", json(false), json(false), Ids{}, Ids{}},
        std::tuple{"defaults", json(), json(), Ids{261}, Ids{}}}) {
    SCOPED_TRACE(name);
    TinySpec llama_class = spec(llama);
    (*llama_class.config)["tokenizer_class"] = "LlamaTokenizerFast";
    if (!add_bos.is_null()) (*llama_class.config)["add_bos_token"] = add_bos;
    if (!add_eos.is_null()) (*llama_class.config)["add_eos_token"] = add_eos;
    const auto t = hf_tokenizer(write_tokenizer(path(name), llama_class));
    EXPECT_EQ(t.before, before);
    EXPECT_EQ(t.after, after);
  }
  // Megatron's --tokenizer-hf-no-include-special-tokens: nothing around a text.
  const auto bare = data::load_preprocess_tokenizer(
      {.type = "HuggingFaceTokenizer", .tokenizer_model = path("llama"), .include_special_tokens = false});
  EXPECT_TRUE(bare.before.empty());
  EXPECT_TRUE(bare.after.empty());
  write_tokenizer(path("odd"), spec({{"type", "BlenderProcessing"}}));
  expect_error([&] { hf_tokenizer(path("odd")); }, {path("odd/tokenizer.json"), "post_processor", "BlenderProcessing"});
  // Ids past the vocabulary, and pieces of other types (were: written into the data; an internal error).
  json past = llama;
  past["special_tokens"]["<s>"]["ids"] = {9999};
  write_tokenizer(path("past"), spec(past));
  expect_error([&] { hf_tokenizer(path("past")); },
               {path("past/tokenizer.json"), "post_processor.special_tokens.<s>.ids: id 9999 is not in the tokenizer's "
                                             "vocabulary of "});
  json odd_piece = llama;
  odd_piece["single"][0] = {{"SpecialToken", 5}};
  write_tokenizer(path("odd_piece"), spec(odd_piece));
  expect_error([&] { hf_tokenizer(path("odd_piece")); }, {path("odd_piece/tokenizer.json"), "post_processor.single[0]"});
  json odd_entry = llama;
  odd_entry["special_tokens"]["<s>"] = 5;
  write_tokenizer(path("odd_entry"), spec(odd_entry));
  expect_error([&] { hf_tokenizer(path("odd_entry")); }, {path("odd_entry/tokenizer.json"), "no ids for \"<s>\""});
}

// A pipe (/dev/stdin, <(zstdcat ...)) is read once, as JSON Lines, as Megatron reads every input.
TEST_F(Preprocess, APipeIsReadAsJsonLines) {
  const auto t = hf_tokenizer(write_tokenizer(path("tok")));
  const std::string fifo = path("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] { std::ofstream(fifo) << jsonl({{{"text", "hello"}}, {{"text", "the end"}}}); });
  data::PreprocessOptions o;
  o.inputs = {fifo};
  o.output_prefix = path("piped");
  o.append_eod = true;
  data::preprocess(o, t);
  writer.join();
  const auto docs = read_megatron(path("piped_text_document"));
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0].tokens, expected(t, "hello"));
  EXPECT_EQ(docs[1].tokens, expected(t, "the end"));
}

TEST_F(Preprocess, SplitSentencesWritesOneSequencePerSentence) {
  const auto t = hf_tokenizer(write_tokenizer(path("tok")));
  write_text(path("in.jsonl"), jsonl({{{"text", "Hello there. the hello!  the end"}}, {{"text", "  "}}}));
  data::PreprocessOptions o;
  o.inputs = {path("in.jsonl")};
  o.output_prefix = path("out");
  o.split_sentences = true;
  o.append_eod = true;
  EXPECT_EQ(data::preprocess(o, t).outputs, std::vector<std::string>{path("out_text_sentence")});
  const auto docs = read_megatron(path("out_text_sentence"));
  ASSERT_EQ(docs.size(), 2u);
  const Ids a = expected(t, "Hello there.", false), b = expected(t, "the hello!", false), c = expected(t, "the end");
  EXPECT_EQ(docs[0].sequences, (std::vector<size_t>{a.size(), b.size(), c.size()})) << "EOD ends the last sentence";
  Ids all = a;
  all.insert(all.end(), b.begin(), b.end());
  all.insert(all.end(), c.begin(), c.end());
  EXPECT_EQ(docs[0].tokens, all);
  EXPECT_TRUE(docs[1].sequences.empty());

  o.format = data::OutputFormat::mds;
  o.output_prefix = path("mds");
  expect_error([&] { data::preprocess(o, t); }, {"--split-sentences", "--format megatron"});
}

TEST_F(Preprocess, MdsShards) {
  const auto t = hf_tokenizer(write_tokenizer(path("tok")));
  auto [o, documents] = corpus_documents(t, 7);
  std::vector<Ids> nonempty;
  for (const Ids& ids : documents)
    if (!ids.empty()) nonempty.push_back(ids);  // MDS cannot hold an empty array

  o.format = data::OutputFormat::mds;
  o.output_prefix = path("mds/");
  o.mds.compression = "zstd:5";
  o.mds.size_limit = 4096;
  o.mds.hashes = {"xxh3_64", "xxh64"};
  o.mds.tokens = data::MdsTokenDType::u16;
  EXPECT_EQ(data::preprocess(o, t).outputs, std::vector<std::string>{path("mds")});
  EXPECT_EQ(read_mds(path("mds")), nonempty);
  const data::MdsDataset dataset(path("mds"));
  EXPECT_GT(dataset.shards().size(), 3u);
  EXPECT_EQ(dataset.shards()[0].column_encodings, std::vector<std::string>{"ndarray:uint16"});
  EXPECT_EQ(dataset.shards()[0].compression, "zstd:5");

  // Several keys: one folder each.
  o.output_prefix = path("two");
  o.json_keys = {"text", "title"};
  o.mds = {};
  EXPECT_EQ(data::preprocess(o, t).outputs, (std::vector<std::string>{path("two_text"), path("two_title")}));
  EXPECT_EQ(read_mds(path("two_text")), nonempty);
  EXPECT_EQ(data::MdsDataset(path("two_title")).shards()[0].column_encodings,
            std::vector<std::string>{"ndarray:int32"});
}

// --concat-tokens: LLM Foundry's ConcatTokensDataset, the documents' tokens one
// after another in samples of exactly N, the rest after the last dropped; with
// --no-wrap, a document's tokens past a full sample are dropped too.
TEST_F(Preprocess, MdsSamplesOfConcatenatedTokens) {
  const auto t = hf_tokenizer(write_tokenizer(path("tok")));
  auto [o, documents] = corpus_documents(t, 11);
  Ids stream;
  for (const Ids& d : documents) stream.insert(stream.end(), d.begin(), d.end());

  o.format = data::OutputFormat::mds;
  o.concat_tokens = 16;
  o.workers = 3;
  o.output_prefix = path("packed");
  const data::PreprocessResult r = data::preprocess(o, t);
  const std::vector<Ids> samples = read_mds(path("packed"));
  ASSERT_EQ(samples.size(), stream.size() / 16);
  for (size_t i = 0; i < samples.size(); ++i) {
    EXPECT_EQ(samples[i], Ids(stream.begin() + std::ptrdiff_t(16 * i), stream.begin() + std::ptrdiff_t(16 * (i + 1)))) << i;
  }
  EXPECT_EQ(r.samples, samples.size());
  EXPECT_EQ(r.dropped_tokens, stream.size() % 16);

  o.wrap = false;
  o.output_prefix = path("no_wrap");
  std::vector<Ids> want;
  Ids buffer;
  for (const Ids& d : documents) {
    buffer.insert(buffer.end(), d.begin(), d.end());
    if (buffer.size() >= 16) {
      want.emplace_back(buffer.begin(), buffer.begin() + 16);
      buffer.clear();
    }
  }
  EXPECT_EQ(read_mds((data::preprocess(o, t), path("no_wrap"))), want);

  o.append_eod = false;  // this tokenizer adds nothing around a text: the documents would run together
  o.output_prefix = path("refused");
  EXPECT_NE(error_of([&] { data::preprocess(o, t); }).find("--concat-tokens without --append-eod"), std::string::npos);
  o.append_eod = true;
  o.format = data::OutputFormat::megatron;
  EXPECT_NE(error_of([&] { data::preprocess(o, t); }).find("--concat-tokens: MDS output packs its samples"),
            std::string::npos);
}

TEST_F(Preprocess, SameBytesForAnyNumberOfWorkers) {
  const auto t = hf_tokenizer(write_tokenizer(path("tok")));
  write_text(path("in.jsonl"), random_corpus(3000, 11));
  std::vector<uint8_t> bin, idx, shard, index;
  for (const unsigned workers : {1u, 2u, 4u, 8u}) {
    SCOPED_TRACE(workers);
    data::PreprocessOptions o;
    o.inputs = {path("in.jsonl")};
    o.output_prefix = path("w" + std::to_string(workers));
    o.append_eod = true;
    o.workers = workers;
    unsigned calls = 0;
    uint64_t last = 0, last_read = 0;
    const auto r = data::preprocess(
        o, t,
        [&](const data::PreprocessProgress& p) {
          ++calls;
          EXPECT_GE(p.documents, last);
          last = p.documents;
          // How far through the input: its size known, the bytes read rising to it.
          EXPECT_EQ(p.input_bytes_total, std::filesystem::file_size(path("in.jsonl")));
          EXPECT_GE(p.input_bytes_read, last_read);
          EXPECT_LE(p.input_bytes_read, p.input_bytes_total);
          last_read = p.input_bytes_read;
        },
        0.0005);
    EXPECT_EQ(r.documents, 3000u);
    EXPECT_GE(r.documents, last);
    EXPECT_EQ(last_read, std::filesystem::file_size(path("in.jsonl")));  // the last report: all of it
    EXPECT_GT(calls, 0u) << "3000 documents take longer than 0.5 ms";
    const std::string prefix = o.output_prefix + "_text_document";
    if (workers == 1) {
      bin = read_bytes(prefix + ".bin");
      idx = read_bytes(prefix + ".idx");
    } else {
      EXPECT_TRUE(read_bytes(prefix + ".bin") == bin);
      EXPECT_TRUE(read_bytes(prefix + ".idx") == idx);
    }
    o.format = data::OutputFormat::mds;
    o.output_prefix = path("mds" + std::to_string(workers));
    o.mds.size_limit = 0;  // one shard
    data::preprocess(o, t);
    if (workers == 1) {
      shard = read_bytes(o.output_prefix + "/shard.00000.mds");
      index = read_bytes(o.output_prefix + "/index.json");
    } else {
      EXPECT_TRUE(read_bytes(o.output_prefix + "/shard.00000.mds") == shard);
      EXPECT_TRUE(read_bytes(o.output_prefix + "/index.json") == index);
    }
  }
  EXPECT_EQ(read_megatron(path("w1_text_document")).size(), 3000u);
}

// LLM Foundry's shards of text (convert_dataset_hf.py without --concat_tokens)
// tokenize as the same texts in JSONL do, byte for byte, for any worker count.
TEST_F(Preprocess, MdsShardsOfTextTokenizeLikeTheirJsonl) {
  const auto t = hf_tokenizer(write_tokenizer(path("tok")));
  const std::string corpus = random_corpus(400, 5);
  write_text(path("in.jsonl"), corpus);
  std::vector<std::vector<std::string>> rows;
  for (size_t pos = 0, end; pos < corpus.size(); pos = end + 1) {
    end = corpus.find('\n', pos);
    const json line = json::parse(corpus.substr(pos, end - pos));
    rows.push_back({line["text"], line["title"], raw_bytes<int64_t>({line["id"].get<int64_t>()})});
  }
  write_mds_fixture(path("foundry"), {{"text", "str"}, {"title", "str"}, {"id", "int"}}, rows);
  for (const unsigned workers : {1u, 3u}) {
    for (const auto format : {data::OutputFormat::megatron, data::OutputFormat::mds}) {
      SCOPED_TRACE(fmt::format("{} workers, format {}", workers, int(format)));
      data::PreprocessOptions o;
      o.json_keys = {"text", "title"};
      o.append_eod = true;
      o.workers = workers;
      o.format = format;
      o.inputs = {path("in.jsonl")};
      o.output_prefix = path(fmt::format("jsonl{}{}", workers, int(format)));
      const auto from_jsonl = data::preprocess(o, t);
      o.inputs = {path("foundry")};
      o.output_prefix = path(fmt::format("mds{}{}", workers, int(format)));
      const auto from_mds = data::preprocess(o, t);
      EXPECT_EQ(from_mds.documents, 400u);
      EXPECT_EQ(from_mds.tokens, from_jsonl.tokens);
      EXPECT_EQ(from_mds.bytes, from_jsonl.bytes);
      for (size_t k = 0; k < from_mds.outputs.size(); ++k) {
        const bool megatron = format == data::OutputFormat::megatron;
        for (const char* file : megatron ? std::vector<const char*>{".bin", ".idx"}
                                         : std::vector<const char*>{"/shard.00000.mds", "/index.json"})
          EXPECT_TRUE(read_bytes(from_mds.outputs[k] + file) == read_bytes(from_jsonl.outputs[k] + file))
              << from_mds.outputs[k] << file;
      }
    }
  }
  // A key that is not a text column fails at once, naming the dataset; nothing is left.
  data::PreprocessOptions o;
  o.inputs = {path("foundry")};
  o.json_keys = {"body"};
  o.output_prefix = path("body");
  expect_error([&] { data::preprocess(o, t); }, {path("foundry"), "no text column 'body'", "text (str)"});
  EXPECT_FALSE(fs::exists(path("body_body_document.bin")));
}

// Hugging Face datasets' Parquet files (and folders of them) tokenize as the same
// rows in JSONL do; a key that is not a string column is an error naming the row.
TEST_F(Preprocess, ParquetRowsTokenizeLikeTheirJsonl) {
  const auto t = hf_tokenizer(write_tokenizer(path("tok")));
  const std::string fixtures = std::string(HONE_SOURCE_DIR) + "/tests/data/formats/parquet/";
  const json expected = json::parse(read_file(fixtures + "expected.json"));
  std::string lines;
  for (const json& record : expected["records"]) lines += record.dump() + "\n";
  write_text(path("records.jsonl"), lines);
  write_text(path("records_again.jsonl"), lines);  // the second shard holds the same rows
  fs::create_directories(path("shards"));
  fs::copy_file(fixtures + "snappy_v1.parquet", path("shards/train-00000.parquet"));
  fs::copy_file(fixtures + "zstd_v2.parquet", path("shards/train-00001.parquet"));
  data::PreprocessOptions o;
  o.json_keys = {"instruction", "output"};
  o.append_eod = true;
  o.inputs = {path("records.jsonl"), path("records_again.jsonl")};
  o.output_prefix = path("jsonl");
  const auto from_jsonl = data::preprocess(o, t);
  o.inputs = {path("shards")};
  o.output_prefix = path("parquet");
  o.workers = 3;
  const auto from_parquet = data::preprocess(o, t);
  EXPECT_EQ(from_parquet.documents, 600u);
  EXPECT_EQ(from_parquet.files, 2u);
  for (size_t k = 0; k < 2; ++k) {
    for (const char* ext : {".bin", ".idx"})
      EXPECT_TRUE(read_bytes(from_parquet.outputs[k] + ext) == read_bytes(from_jsonl.outputs[k] + ext))
          << from_parquet.outputs[k] << ext;
  }
  o.json_keys = {"input"};  // null in every fifth row
  o.output_prefix = path("input");
  expect_error([&] { data::preprocess(o, t); },
               {path("shards/train-00000.parquet") + ": row 0: column 'input' is null, expected a string"});
  o.json_keys = {"score"};
  expect_error([&] { data::preprocess(o, t); }, {"row 0: column 'score' is number, expected a string"});
}

TEST_F(Preprocess, TokenizerTypesAndFiles) {
  write_tokenizer(path("hf"));
  write_text(path("list.json"), R"([{"rank": 0, "token_bytes": "AA==", "token_str": "\u0000"}])");
  // The type decides which files fit; the file's kind decides the type when none is given.
  EXPECT_EQ(data::load_preprocess_tokenizer({"", "", "", path("hf")}).type, "HuggingFaceTokenizer");
  expect_error([&] { data::load_preprocess_tokenizer({"Llama2Tokenizer", "", "", path("hf")}); },
               {path("hf"), "Llama2Tokenizer expects a SentencePiece .model", "a Hugging Face tokenizer.json"});
  expect_error([&] { data::load_preprocess_tokenizer({"TikTokenizer", "", "", path("hf/tokenizer.json")}); },
               {path("hf/tokenizer.json"), "TikTokenizer expects a tiktoken rank file"});
  expect_error([&] { data::load_preprocess_tokenizer({"TikTokenizer", "", "", path("list.json")}); },
               {path("list.json"), "Megatron's own TikTokenizer vocabulary"});
  expect_error([&] { data::load_preprocess_tokenizer({"BertWordPieceCase", "", "", path("hf")}); },
               {"BertWordPieceCase", "not supported", "GPT2BPETokenizer"});
  expect_error([&] { data::load_preprocess_tokenizer({"GPT2BPETokenizer", path("v.json"), "", ""}); },
               {"--merge-file"});
  expect_error([&] { data::load_preprocess_tokenizer({"HuggingFaceTokenizer", "", "", ""}); }, {"--tokenizer-model"});

  // No EOS token: --append-eod has no id to append.
  const auto t = hf_tokenizer(write_tokenizer(path("no_eos"), TinySpec{nullptr, {}, std::nullopt}));
  EXPECT_FALSE(t.eod.has_value());
  write_text(path("in.jsonl"), jsonl({{{"text", "x"}}}));
  data::PreprocessOptions o;
  o.inputs = {path("in.jsonl")};
  o.output_prefix = path("out");
  o.append_eod = true;
  expect_error([&] { data::preprocess(o, t); }, {path("no_eos"), "--append-eod", "HuggingFaceTokenizer"});
}

// ---- the binary ----

TEST_F(Preprocess, CliRoundTripMdsAndMegatronFlags) {
  write_tokenizer(path("tok"));
  write_text(path("in.jsonl"), random_corpus(50, 3));
  const std::string common = "--input " + path("in.jsonl") + " --tokenizer-type HuggingFaceTokenizer --tokenizer-model " +
                             path("tok") + " --append-eod";
  // Flags Megatron scripts pass that change nothing in hone.
  HoneRun r = hone("preprocess " + common + " --output-prefix " + path("m") +
               " --workers 3 --partitions 1 --log-interval 10 --dataset-impl mmap --keep-sequential-samples --lang english");
  ASSERT_EQ(r.status, 0) << r.err;
  // Not a terminal: a progress line at each 10 documents, as Megatron prints them, then the summary.
  std::istringstream err(r.err);
  int logged = 0;
  for (std::string line; std::getline(err, line);) {
    EXPECT_EQ(line.rfind(fmt::format("Processed {} documents (", 10 * ++logged), 0), 0u) << r.err;
  }
  EXPECT_EQ(logged, 5) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_EQ(r.out.rfind("preprocessed 50 documents, ", 0), 0u) << r.out;
  for (const char* part : {" tokens, ", " MB in ", " MB/s", "docs/s", "m_text_document.bin/.idx"})
    EXPECT_NE(r.out.find(part), std::string::npos) << part << " in " << r.out;
  const auto t = hf_tokenizer(path("tok"));
  std::vector<Ids> want, nonempty;
  const std::string lines = read_file(path("in.jsonl"));
  for (size_t pos = 0, end; pos < lines.size(); pos = end + 1) {
    end = lines.find('\n', pos);
    want.push_back(expected(t, json::parse(lines.substr(pos, end - pos))["text"].get<std::string>()));
    if (!want.back().empty()) nonempty.push_back(want.back());
  }
  EXPECT_EQ(tokens_of(read_megatron(path("m_text_document"))), want);

  r = hone("preprocess " + common + " --output-prefix " + path("s") +
           " --format mds --mds-compression zstd --mds-size-limit 2kb --mds-hashes xxh64,xxh32 --mds-dtype uint16");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(path("s") + "/"), std::string::npos) << r.out;
  EXPECT_EQ(read_mds(path("s")), nonempty);
  EXPECT_EQ(data::MdsDataset(path("s")).shards()[0].hashes, (std::vector<std::string>{"xxh32", "xxh64"}));
  EXPECT_TRUE(fs::exists(path("s/shard.00000.mds.zstd")));
}

TEST_F(Preprocess, CliErrorsExitWith2AndOneLineAndLeaveNoOutput) {
  write_tokenizer(path("tok"));
  write_tokenizer(path("big"), TinySpec{nullptr, {{"<|endoftext|>", 260}, {"<big>", 70000}}, std::nullopt});
  write_text(path("bad.jsonl"), "{\"text\": \"fine\"}\n{\"text\": \"fine\"}\n{\"text\": \"cut\n");
  write_text(path("keys.jsonl"), "{\"text\": \"a\", \"title\": \"b\"}\n{\"text\": \"a\"}\n");
  write_text(path("good.jsonl"), "{\"text\": \"a\"}\n");
  write_text(path("notes.txt"), "hello\nworld\n");
  fs::create_directories(path("full"));
  write_text(path("full/x"), "");
  const std::string tok = " --tokenizer-model " + path("tok");
  const std::string out = " --output-prefix " + path("out");
  expect_user_error("preprocess --input " + path("bad.jsonl") + tok + out, {path("bad.jsonl") + ":3"});
  // The folders made for the output go too.
  expect_user_error("preprocess --input " + path("bad.jsonl") + tok + " --output-prefix " + path("new/sub/out"),
                    {path("bad.jsonl") + ":3"});
  expect_user_error("preprocess --input " + path("keys.jsonl") + " --json-keys text title" + tok + out,
                    {path("keys.jsonl") + ":2", "title"});
  expect_user_error("preprocess --input " + path("good.jsonl") + " --tokenizer-type Llama2Tokenizer" + tok + out,
                    {path("tok"), "SentencePiece"});
  expect_user_error("preprocess --input " + path("good.jsonl") + " --tokenizer-model " + path("notes.txt") + out,
                    {path("notes.txt"), "not a tokenizer"});
  expect_user_error("preprocess --input " + path("good.jsonl") + " --tokenizer-model " + path("big") + out +
                        " --format mds --mds-dtype uint16",
                    {path("big"), "70001", "uint16"});
  expect_user_error("preprocess --input " + path("good.jsonl") + tok + " --format mds --output-prefix " + path("full"),
                    {path("full"), "not an empty folder"});
  expect_user_error("preprocess --input " + path("missing.jsonl") + tok + out, {path("missing.jsonl")});
  // Input that holds nothing to train on.
  write_text(path("empty.jsonl"), "");
  write_text(path("blank.jsonl"), "{\"text\": \"\"}\n{\"text\": \"\"}\n");
  expect_user_error("preprocess --input " + path("empty.jsonl") + tok + out,
                    {path("empty.jsonl") + ": no documents in the input"});
  expect_user_error("preprocess --input " + path("blank.jsonl") + tok + " --format mds" + out,
                    {path("blank.jsonl") + ": 2 documents, all empty: no tokens to write"});
  expect_user_error("preprocess --input " + path("good.jsonl") + tok + out + " --mds-size-limit 3xb",
                    {"--mds-size-limit"});
  // Megatron flags hone does not take name the flag and say why.
  expect_user_error("preprocess --input " + path("good.jsonl") + tok + out + " --tiktoken-pattern v2",
                    {"--tiktoken-pattern", "tiktoken rank file as --tokenizer-model"});
  expect_user_error("preprocess --input " + path("good.jsonl") + tok + out + " --workers-to-check 2 4",
                    {"--workers-to-check", "--workers N"});
  expect_user_error("preprocess --input " + path("good.jsonl") + tok + out + " --find-optimal-num-workers",
                    {"--find-optimal-num-workers", "--workers N"});
  // A later error removes what the earlier documents wrote: nothing half-written stays.
  std::string many;
  for (int i = 0; i < 5000; ++i) many += "{\"text\": \"the hello world\"}\n";
  write_text(path("late.jsonl"), many + "{\"text\": 7}\n");
  expect_user_error("preprocess --input " + path("late.jsonl") + tok + out + " --workers 2",
                    {path("late.jsonl") + ":5001", "text"});
  // The vocabulary picks the Megatron dtype: int32 at 65500 tokens and above.
  const HoneRun r = hone("preprocess --input " + path("good.jsonl") + " --tokenizer-model " + path("big") + out);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(data::MegatronDataset(path("out_text_document")).dtype(), data::MegatronDType::i32);
}

TEST_F(Preprocess, NullTokenizerTakesTextThatIsAlreadyTokenIds) {
  // Megatron's NullTokenizer: the ids as decimal numbers; EOD is --vocab-size itself.
  write_text(path("ids.jsonl"), "{\"text\": \"5 3 9\"}\n{\"text\": \" 1  2\\n7 \"}\n{\"text\": \"\"}\n");
  const std::string null_tokenizer = " --tokenizer-type NullTokenizer --vocab-size ";
  HoneRun r = hone("preprocess --input " + path("ids.jsonl") + " --output-prefix " + path("small") + null_tokenizer +
                   "10 --append-eod");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(tokens_of(read_megatron(path("small_text_document"))) == (std::vector<Ids>{{5, 3, 9, 10}, {1, 2, 7, 10}, {}}));
  EXPECT_EQ(data::MegatronDataset(path("small_text_document")).dtype(), data::MegatronDType::u16);
  // The vocabulary (ids and EOD) picks the dtype, as for the other tokenizers.
  r = hone("preprocess --input " + path("ids.jsonl") + " --output-prefix " + path("large") + null_tokenizer + "70000");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(data::MegatronDataset(path("large_text_document")).dtype(), data::MegatronDType::i32);
  // A word that is not an id below --vocab-size is named with its document; the flag goes with this type only.
  write_text(path("bad_ids.jsonl"), "{\"text\": \"1 2\"}\n{\"text\": \"4 10\"}\n");
  expect_user_error("preprocess --input " + path("bad_ids.jsonl") + " --output-prefix " + path("bad") + null_tokenizer +
                        "10",
                    {path("bad_ids.jsonl") + ":2", "'10'", "[0, 10)"});
  expect_user_error("preprocess --input " + path("ids.jsonl") + " --output-prefix " + path("bad") +
                        " --tokenizer-type NullTokenizer",
                    {"--vocab-size"});
  write_tokenizer(path("tok"));
  expect_user_error("preprocess --input " + path("ids.jsonl") + " --output-prefix " + path("bad") +
                        " --tokenizer-model " + path("tok") + " --vocab-size 10",
                    {"--vocab-size goes with --tokenizer-type NullTokenizer"});
}

// Runs hone with stdout and stderr into `log`; returns its pid.
pid_t spawn_hone(std::vector<std::string> args, const std::string& log) {
  std::string binary = hone_binary();
  std::vector<char*> argv{binary.data()};
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

// Waits until a file whose name holds `fragment` appears in `dir`.
bool wait_for_file(const std::string& dir, const std::string& fragment) {
  for (int i = 0; i < 10000; ++i) {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().filename().string().find(fragment) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

TEST_F(Preprocess, InterruptedRunsLeaveNoFinishedOutput) {
  write_tokenizer(path("tok"));
  // About 96 MB: long enough to be stopped in the middle, even on a fast machine.
  std::string line = "{\"text\": \"";
  std::mt19937 rng(5);
  const char* words[] = {"the ", "hello ", "world ", "he ", "tell ", "a ", "caf\\u00e9 "};
  while (line.size() < 8000) line += words[rng() % 7];
  line += "\"}\n";
  {
    std::ofstream f(path("big.jsonl"), std::ios::binary);
    for (int i = 0; i < 12000; ++i) f << line;
  }
  fs::create_directories(path("out"));
  const std::vector<std::string> args = {"preprocess", "--input", path("big.jsonl"), "--tokenizer-model", path("tok"),
                                         "--workers", "1", "--output-prefix", path("out/big")};
  // SIGKILL: no cleanup at all, yet no file has a final name.
  const pid_t killed = spawn_hone(args, path("kill.log"));
  ASSERT_TRUE(wait_for_file(path("out"), ".tmp."));
  ::kill(killed, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(killed, &status, 0), killed);
  ASSERT_TRUE(WIFSIGNALED(status)) << "finished before it was killed; make big.jsonl bigger";
  for (const auto& e : fs::directory_iterator(path("out")))
    EXPECT_NE(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  fs::remove_all(path("out"));
  fs::create_directories(path("out"));

  // SIGTERM on a terminal: progress is drawn in place, then the run stops, removes
  // its temporary files and exits with 128 + 15.
  int master = -1;
  const pid_t child = forkpty(&master, nullptr, nullptr, nullptr);
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::string binary = hone_binary();
    std::vector<std::string> copy = args;
    std::vector<char*> argv{binary.data()};
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  std::string screen;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (screen.find("MB/s") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      std::array<char, 512> buffer;
      const ssize_t n = ::read(master, buffer.data(), buffer.size());
      if (n <= 0) break;
      screen.append(buffer.data(), size_t(n));
    }
  }
  ::kill(child, SIGTERM);
  for (std::array<char, 512> buffer;;) {  // drain until the child closes the terminal
    const ssize_t n = ::read(master, buffer.data(), buffer.size());
    if (n <= 0) break;
    screen.append(buffer.data(), size_t(n));
  }
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ::close(master);
  EXPECT_NE(screen.find("\r\033[K"), std::string::npos) << screen;
  EXPECT_NE(screen.find(" docs/s"), std::string::npos) << screen;
  ASSERT_TRUE(WIFEXITED(status)) << screen;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << screen;
  EXPECT_NE(screen.find("stopped by signal 15"), std::string::npos) << screen;
  EXPECT_TRUE(fs::is_empty(path("out"))) << "the temporary files are removed too";

  // SIGINT off a terminal: a progress line every --log-interval documents, as
  // Megatron prints; the run stops, and the folders it made go with its files.
  std::vector<std::string> nested = args;
  nested.back() = path("out/new/sub/big");
  nested.insert(nested.end(), {"--log-interval", "100"});
  const pid_t interrupted = spawn_hone(nested, path("int.log"));
  const auto logged = [&] { return fs::exists(path("int.log")) && read_file(path("int.log")).find("Processed ") != std::string::npos; };
  for (int i = 0; i < 20000 && !(logged() && fs::exists(path("out/new/sub"))); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(wait_for_file(path("out/new/sub"), ".tmp.")) << read_file(path("int.log"));
  ::kill(interrupted, SIGINT);
  ASSERT_EQ(::waitpid(interrupted, &status, 0), interrupted);
  const std::string log = read_file(path("int.log"));
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT) << log;
  EXPECT_TRUE(std::regex_search(log, std::regex(R"((^|\n)Processed [0-9]+ documents \([0-9]+ docs/s, [0-9.]+ MB/s\)\.\n)")))
      << log;
  EXPECT_FALSE(fs::exists(path("out/new"))) << log;
}

// ---- with the real tokenizer files ----

TEST_F(Preprocess, AssetsGpt2MatchesTheTokenizerPlusEndOfText) {
  const std::string gpt2 = asset_path("tokenizers/gpt2");
  std::vector<std::string> speeches;
  std::string lines;
  for (const char* name : {"1790_george_washington_n.txt", "1863_abraham_lincoln_r.txt", "1941_franklin_d_roosevelt_d.txt"}) {
    speeches.push_back(read_file(asset_path(std::string("corpora/sotu/") + name)));
    lines += json{{"text", speeches.back()}}.dump() + "\n";
  }
  write_gzip(path("sotu.jsonl.gz"), lines);
  const HoneRun r = hone("preprocess --input " + path("sotu.jsonl.gz") + " --output-prefix " + path("sotu") +
                     " --tokenizer-type GPT2BPETokenizer --vocab-file " + gpt2 + "/encoder.json --merge-file " + gpt2 +
                     "/vocab.bpe --append-eod --workers 2");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("preprocessed 3 documents", 0), 0u) << r.out;
  const auto tokenizer = load_tokenizer(gpt2);
  std::vector<Ids> want;
  for (const std::string& s : speeches) {
    want.push_back(tokenizer->encode(s, SpecialTokens::recognize));
    want.back().push_back(50256);  // <|endoftext|>
  }
  EXPECT_TRUE(tokens_of(read_megatron(path("sotu_text_document"))) == want);
  EXPECT_EQ(data::MegatronDataset(path("sotu_text_document")).dtype(), data::MegatronDType::u16);
  // Older scripts spell --vocab-file as --vocab (argparse's prefix matching): the same bytes.
  const HoneRun old_spelling = hone("preprocess --input " + path("sotu.jsonl.gz") + " --output-prefix " +
                                    path("old") + " --tokenizer-type GPT2BPETokenizer --vocab " + gpt2 +
                                    "/encoder.json --merge-file " + gpt2 + "/vocab.bpe --append-eod --workers 1");
  ASSERT_EQ(old_spelling.status, 0) << old_spelling.err;
  EXPECT_EQ(read_file(path("old_text_document.bin")), read_file(path("sotu_text_document.bin")));
}

TEST_F(Preprocess, AssetsSentencePieceAndTiktoken) {
  fs::create_directories(path("speeches"));
  const std::string speech = read_file(asset_path("corpora/sotu/1961_john_f_kennedy_d.txt")).substr(0, 3000);
  write_text(path("speeches/a.txt"), "<s> " + speech);

  // Llama2Tokenizer (a SentencePiece .model): no BOS, "<s>" in the text stays text, EOD is EOS.
  const std::string spm = asset_path("tokenizers/spm/sotu.model");
  const auto sp = data::load_preprocess_tokenizer({"Llama2Tokenizer", "", "", spm});
  ASSERT_TRUE(sp.eod.has_value());
  EXPECT_EQ(sp.eod, sp.tokenizer->eos_id());
  HoneRun r = hone("preprocess --input " + path("speeches") + " --output-prefix " + path("sp") +
               " --tokenizer-type Llama2Tokenizer --tokenizer-model " + spm + " --append-eod");
  ASSERT_EQ(r.status, 0) << r.err;
  Ids want = sp.tokenizer->encode("<s> " + speech);
  EXPECT_NE(want.front(), sp.tokenizer->bos_id());
  want.push_back(*sp.eod);
  EXPECT_TRUE(read_megatron(path("sp_text_document"))[0].tokens == want);

  // TikTokenizer with cl100k_base: 100277 ids need int32; EOD is <|endoftext|>.
  const std::string cl100k = asset_path("tokenizers/tiktoken/cl100k_base.json");
  r = hone("preprocess --input " + path("speeches/a.txt") + " --output-prefix " + path("tt") +
           " --tokenizer-type TikTokenizer --tokenizer-model " + cl100k + " --append-eod");
  ASSERT_EQ(r.status, 0) << r.err;
  want = load_tokenizer(cl100k)->encode("<s> " + speech, SpecialTokens::recognize);
  want.push_back(100257);
  EXPECT_TRUE(read_megatron(path("tt_text_document"))[0].tokens == want);
  EXPECT_EQ(data::MegatronDataset(path("tt_text_document")).dtype(), data::MegatronDType::i32);
}

}  // namespace
}  // namespace hone::test
