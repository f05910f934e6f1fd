// Text inputs: JSONL lines and keys, plain text files and folders, gzip and zstd
// streams (multi-member, multi-frame, truncated, corrupt), and their error lines.
#include <zlib.h>
#include <zstd.h>

#include "formats_test.hpp"
#include "hone/data/formats/inputs.hpp"
#include "support/mds_fixture.hpp"

namespace hone::test {
namespace {

using data::DocumentReader;
using data::InputStream;
using data::TextDocument;

using InputsTest = FormatsTest;

std::vector<TextDocument> read_all(std::vector<std::string> inputs, std::vector<std::string> keys) {
  DocumentReader reader(inputs, std::move(keys));
  std::vector<TextDocument> out;
  TextDocument doc;
  while (reader.next(doc)) out.push_back(doc);
  return out;
}

void write_gzip(const std::string& path, const std::vector<std::string>& members) {
  bool first = true;
  for (const std::string& member : members) {
    gzFile f = gzopen(path.c_str(), first ? "wb" : "ab");  // "ab" appends a second gzip member
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, member.data(), unsigned(member.size())), int(member.size()));
    gzclose(f);
    first = false;
  }
}

std::vector<uint8_t> zstd_frames(const std::vector<std::string>& frames) {
  std::vector<uint8_t> out;
  for (const std::string& frame : frames) {
    std::vector<uint8_t> buffer(ZSTD_compressBound(frame.size()));
    const size_t n = ZSTD_compress(buffer.data(), buffer.size(), frame.data(), frame.size(), 3);
    EXPECT_FALSE(ZSTD_isError(n));
    out.insert(out.end(), buffer.begin(), buffer.begin() + long(n));
  }
  return out;
}

TEST_F(InputsTest, JsonlKeysLinesAndOrigins) {
  write_text(path("a.jsonl"), "{\"text\": \"first\", \"title\": \"t1\"}\r\n\n  \n{\"title\": \"t2\", \"text\": \"sec\\nond\"}");
  const auto docs = read_all({path("a.jsonl")}, {"text", "title"});
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0].origin, path("a.jsonl") + ":1");
  EXPECT_EQ(docs[0].fields, (std::vector<std::string>{"first", "t1"}));
  EXPECT_EQ(docs[1].origin, path("a.jsonl") + ":4");  // blank lines are skipped but counted
  EXPECT_EQ(docs[1].fields, (std::vector<std::string>{"sec\nond", "t2"}));
}

TEST_F(InputsTest, JsonlErrorsNameFileLineAndKey) {
  const std::string p = path("bad.jsonl");
  auto check = [&](const std::string& line2, std::initializer_list<std::string> fragments) {
    write_text(p, "{\"text\": \"ok\"}\n" + line2 + "\n");
    expect_error([&] { read_all({p}, {"text"}); }, fragments);
  };
  check("{\"text\": \"unterminated}", {p + ":2: not valid JSON (byte 24: parse error at line 1, column 24: "});
  check("{\"body\": \"x\", \"id\": 3}", {p + ":2: no key 'text'", "'body', 'id'"});
  check("{\"text\": 12}", {p + ":2: key 'text' is number, expected a string"});
  check("[\"text\"]", {p + ":2: expected a JSON object, found array"});
  check("{\"text\": \"a\"} trailing", {p + ":2: not valid JSON ("});
  check("{\"text\": \"\xff\"}", {p + ":2: not valid JSON ("});  // not UTF-8
  check("{\"text\": NaN}", {p + ":2: key 'text' is null, expected a string"});
  check("{\"text\": \"a\", \"n\": NaNa}", {p + ":2: not valid JSON (byte 20: "});
}

// What Python's json.dumps writes beyond JSON (NaN, Infinity, numbers past a
// double) reads, as Megatron's json.loads reads it, in keys not tokenized.
TEST_F(InputsTest, JsonlLinesWithPythonsNumbersRead) {
  write_text(path("py.jsonl"), "{\"text\": \"a NaN, 1e999\", \"score\": NaN, \"xs\": [Infinity, -Infinity, 2e999, -3.5e+2]}\n"
                               "{\"n\": 1e999, \"text\": \"b \\\" NaN\"}\n");
  const auto docs = read_all({path("py.jsonl")}, {"text"});
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0].fields, (std::vector<std::string>{"a NaN, 1e999"}));
  EXPECT_EQ(docs[1].fields, (std::vector<std::string>{"b \" NaN"}));
}

TEST_F(InputsTest, GzipAndZstdDecompressTransparentlyAcrossChunks) {
  // Lines longer than the 128 KiB read chunk, split over two members/frames mid-line.
  std::string text;
  for (int i = 0; i < 6; ++i) text += "{\"text\": \"" + std::string(size_t(100000 + i * 37000), char('a' + i)) + "\"}\n";
  const size_t half = text.size() / 2 + 11;
  const std::vector<std::string> parts{text.substr(0, half), text.substr(half)};
  write_text(path("plain.jsonl"), text);
  write_gzip(path("multi.jsonl.gz"), parts);
  write_bytes(path("multi.jsonl.zst"), zstd_frames(parts));
  write_bytes(path("no_suffix.jsonl"), zstd_frames({text}));  // the magic bytes decide, not the name
  const auto expected = read_all({path("plain.jsonl")}, {"text"});
  ASSERT_EQ(expected.size(), 6u);
  for (const char* name : {"multi.jsonl.gz", "multi.jsonl.zst", "no_suffix.jsonl"}) {
    const auto docs = read_all({path(name)}, {"text"});
    ASSERT_EQ(docs.size(), expected.size()) << name;
    for (size_t i = 0; i < docs.size(); ++i) EXPECT_EQ(docs[i].fields, expected[i].fields) << name << " " << i;
  }
}

TEST_F(InputsTest, TruncatedAndCorruptCompressedInput) {
  const std::string text(300000, 'x');
  write_gzip(path("t.txt.gz"), {text});
  auto gz = read_bytes(path("t.txt.gz"));
  write_bytes(path("short.txt.gz"), std::vector<uint8_t>(gz.begin(), gz.end() - 20));
  expect_error([&] { read_all({path("short.txt.gz")}, {"text"}); }, {path("short.txt.gz"), "gzip data ends early"});
  auto corrupt = gz;
  corrupt[gz.size() / 2] ^= 0xff;
  corrupt[gz.size() / 2 + 1] ^= 0xff;
  write_bytes(path("corrupt.txt.gz"), corrupt);
  expect_error([&] { read_all({path("corrupt.txt.gz")}, {"text"}); }, {path("corrupt.txt.gz"), "corrupt gzip data"});
  auto trailing = gz;
  trailing.insert(trailing.end(), {'j', 'u', 'n', 'k'});
  write_bytes(path("trailing.txt.gz"), trailing);
  expect_error([&] { read_all({path("trailing.txt.gz")}, {"text"}); },
               {path("trailing.txt.gz"), "neither the end of the file nor a gzip member"});

  const auto zst = zstd_frames({text});
  write_bytes(path("short.txt.zst"), std::vector<uint8_t>(zst.begin(), zst.end() - 5));
  expect_error([&] { read_all({path("short.txt.zst")}, {"text"}); }, {path("short.txt.zst"), "zstd data ends early"});
  auto trailing_zst = zst;
  trailing_zst.insert(trailing_zst.end(), {'j', 'u', 'n', 'k', '!', '!'});
  write_bytes(path("trailing.txt.zst"), trailing_zst);
  expect_error([&] { read_all({path("trailing.txt.zst")}, {"text"}); },
               {path("trailing.txt.zst"), "corrupt zstd data near byte"});
}

TEST_F(InputsTest, TextFilesAndFoldersAreOneDocumentPerFileInPathOrder) {
  fs::create_directories(path("corpus/sub"));
  fs::create_directories(path("corpus/.git"));
  write_text(path("corpus/b.txt"), "bee");
  write_text(path("corpus/a.txt"), "ay\r\nline two\n");
  write_gzip(path("corpus/sub/c.txt.gz"), {"sea"});
  write_text(path("corpus/.hidden"), "no");
  write_text(path("corpus/.git/config"), "no");
  write_text(path("corpus/sub/d.jsonl"), "{\"text\": \"dee\"}\n{\"text\": \"ee\"}\n");
  write_text(path("corpus/sub/wiki_00"), "\n  {\"text\": \"eff\"}\n");  // no extension: JSON Lines by its content
  write_text(path("corpus/README.md"), "# a corpus");  // neither a data name nor without extension: left out
  write_bytes(path("corpus/tok_text_document.idx"), {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0});
  write_text(path("corpus/sub/{brace}.txt"), "{ a text }");  // named as text: text
  write_text(path("single.md"), "solo");
  const auto docs = read_all({path("corpus"), path("single.md")}, {"text"});
  std::vector<std::string> origins, texts;
  for (const auto& d : docs) {
    origins.push_back(d.origin);
    texts.push_back(d.fields.at(0));
  }
  EXPECT_EQ(origins, (std::vector<std::string>{path("corpus/a.txt"), path("corpus/b.txt"), path("corpus/sub/c.txt.gz"),
                                               path("corpus/sub/d.jsonl") + ":1", path("corpus/sub/d.jsonl") + ":2",
                                               path("corpus/sub/wiki_00") + ":2", path("corpus/sub/{brace}.txt"),
                                               path("single.md")}));
  EXPECT_EQ(texts, (std::vector<std::string>{"ay\r\nline two\n", "bee", "sea", "dee", "ee", "eff", "{ a text }", "solo"}));
  // Given by name, any file is read by its content: JSON Lines (Megatron's .loose_json), or text but not binary.
  write_text(path("data.loose_json"), "{\"text\": \"loose\"}\n");
  EXPECT_EQ(read_all({path("data.loose_json")}, {"text"}).at(0).fields.at(0), "loose");
  write_bytes(path("data.bz2"), {'B', 'Z', 'h', '9', '1', 'A', 'Y', '&', 'S', 'Y', 0, 1});
  expect_error([&] { read_all({path("data.bz2")}, {"text"}); },
               {path("data.bz2") + ": byte 10 is NUL: not a text file (binary data, or compressed other than .gz"});
  expect_error([&] { read_all({path("single.md")}, {"text", "title"}); }, {path("single.md"), "one field", "2 JSON keys"});
  expect_error([&] { read_all({path("missing")}, {"text"}); }, {path("missing"), "no such file or folder"});
}

TEST_F(InputsTest, MdsFoldersOfTextAreOneDocumentPerSample) {
  // LLM Foundry's text shards (convert_dataset_hf.py without --concat_tokens),
  // with an int column beside the text, and a JSONL file after the folder.
  write_mds_fixture(path("foundry"), {{"text", "str"}, {"id", "int"}, {"title", "str"}},
                    {{"first text", raw_bytes<int64_t>({1}), "t1"}, {"", raw_bytes<int64_t>({2}), "t2"}});
  write_text(path("more.jsonl"), "{\"text\": \"third\", \"title\": \"t3\"}\n");
  DocumentReader reader(std::vector<std::string>{path("foundry"), path("more.jsonl")}, {"text", "title"});
  EXPECT_EQ(reader.files(), (std::vector<std::string>{path("foundry"), path("more.jsonl")}));
  std::vector<TextDocument> docs;
  for (TextDocument doc; reader.next(doc);) docs.push_back(doc);
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0].origin, path("foundry") + ": sample 0");
  EXPECT_EQ(docs[0].fields, (std::vector<std::string>{"first text", "t1"}));
  EXPECT_EQ(docs[1].origin, path("foundry") + ": sample 1");
  EXPECT_EQ(docs[1].fields, (std::vector<std::string>{"", "t2"}));
  EXPECT_EQ(docs[2].fields, (std::vector<std::string>{"third", "t3"}));

  // A key must name a str column; the error lists the columns there are.
  expect_error([&] { read_all({path("foundry")}, {"body"}); },
               {path("foundry"), "no text column 'body'", "its columns: id (int), text (str), title (str)"});
  expect_error([&] { read_all({path("foundry")}, {"id"}); }, {"no text column 'id'"});
  write_mds_fixture(path("tokens"), {{"tokens", "bytes"}}, {{raw_bytes<int64_t>({1, 2})}});
  expect_error([&] { read_all({path("tokens")}, {"text"}); }, {"its 'tokens' are token ids already"});
  // Shards met while walking a folder are not text: the folder must be an input of its own.
  fs::create_directories(path("corpus"));
  write_text(path("corpus/a.txt"), "text");
  fs::rename(path("foundry"), path("corpus/train"));
  expect_error([&] { read_all({path("corpus")}, {"text"}); },
               {path("corpus/train"), "MDS shards inside the folder " + path("corpus"), "an --input of its own"});
}

// A few bytes of compressed data can decode to gigabytes without a line break
// (a compression bomb): a line or a text past the limit is an error naming the
// file, where reading on took all the memory there was.
TEST_F(InputsTest, ALineOrTextPastTheLimitIsAnError) {
  write_gzip(path("bomb.jsonl.gz"), {std::string(4 << 20, 'x') + "\n"});
  EXPECT_LT(std::filesystem::file_size(path("bomb.jsonl.gz")), 65536u);
  InputStream lines(path("bomb.jsonl.gz"), 1 << 20);
  std::string line;
  expect_error([&] { lines.read_line(line); },
               {path("bomb.jsonl.gz") + ": a line longer than 1048576 bytes (read to byte ",
                "no line break: not JSON Lines, or one record too large to read"});
  InputStream text(path("bomb.jsonl.gz"), 1 << 20);
  expect_error([&] { text.read_all(); }, {path("bomb.jsonl.gz") + ": a text longer than 1048576 bytes"});
  InputStream within(path("bomb.jsonl.gz"), 8 << 20);
  ASSERT_TRUE(within.read_line(line));
  EXPECT_EQ(line.size(), size_t(4 << 20));
}

TEST_F(InputsTest, StreamFromMemoryAndEmptyInput) {
  const std::string text = "one\ntwo\r\nthree";
  std::FILE* f = fmemopen(const_cast<char*>(text.data()), text.size(), "rb");
  ASSERT_NE(f, nullptr);
  {
    InputStream in(f, "memory");
    std::string line;
    std::vector<std::string> lines;
    while (in.read_line(line)) lines.push_back(line);
    EXPECT_EQ(lines, (std::vector<std::string>{"one", "two", "three"}));
  }
  std::fclose(f);
  write_text(path("empty.jsonl"), "");
  EXPECT_TRUE(read_all({path("empty.jsonl")}, {"text"}).empty());
  InputStream empty(path("empty.jsonl"));
  EXPECT_EQ(empty.read_all(), "");
}

}  // namespace
}  // namespace hone::test
