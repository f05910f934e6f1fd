// Parquet files written by the Rust parquet writer (parquet/generate.mjs): every
// codec, page version and encoding hone reads give the rows the writer was
// given; nested lists and structs assemble as JSON; damage is an error naming
// the file.
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "formats_test.hpp"
#include "hone/data/formats/parquet.hpp"

namespace hone::test {
namespace {

using data::ParquetFile;
using Json = nlohmann::ordered_json;

std::string fixture(const std::string& name) {
  return std::string(HONE_SOURCE_DIR) + "/tests/data/formats/parquet/" + name;
}

const nlohmann::json& expected() {
  static const nlohmann::json j = nlohmann::json::parse(std::ifstream(fixture("expected.json")));
  return j;
}

// Every row of every row group, as plain JSON to compare with expected.json.
nlohmann::json all_rows(const ParquetFile& f, const std::vector<std::string>& columns = {}) {
  nlohmann::json rows = nlohmann::json::array();
  for (size_t g = 0; g < f.row_groups(); ++g)
    for (const Json& row : f.read_rows(g, columns)) rows.push_back(nlohmann::json::parse(row.dump()));
  return rows;
}

using ParquetTest = FormatsTest;

TEST_F(ParquetTest, EveryCodecPageVersionAndEncodingReadsTheWrittenRows) {
  for (const char* name : {"snappy_v1.parquet", "zstd_v2.parquet", "gzip_plain.parquet", "delta_v2.parquet"}) {
    SCOPED_TRACE(name);
    const ParquetFile f(fixture(name));
    EXPECT_EQ(f.rows(), 300);
    EXPECT_EQ(f.row_groups(), 3u);  // 128 rows each at most
    EXPECT_EQ(f.column_names(),
              (std::vector<std::string>{"instruction", "input", "output", "id", "score", "small", "flag"}));
    const nlohmann::json rows = all_rows(f);
    ASSERT_EQ(rows.size(), expected()["records"].size());
    for (size_t i = 0; i < rows.size(); ++i) ASSERT_EQ(rows[i], expected()["records"][i]) << "row " << i;
  }
}

TEST_F(ParquetTest, ListsOfStructsAndStructsAssembleAsJson) {
  const ParquetFile f(fixture("chats.parquet"));
  const nlohmann::json rows = all_rows(f);
  ASSERT_EQ(rows.size(), expected()["chats"].size());
  for (size_t i = 0; i < rows.size(); ++i) ASSERT_EQ(rows[i], expected()["chats"][i]) << "row " << i;
  // One column alone.
  EXPECT_EQ(all_rows(f, {"tags"})[2], (nlohmann::json{{"tags", {20, 21}}}));
  expect_error([&] { f.read_rows(0, {"nope"}); },
               {fixture("chats.parquet"), "no column 'nope'", "messages, tags, meta, grid"});
  // Lists of lists, with null and empty inner lists and null elements (in whole rows above too).
  EXPECT_EQ(all_rows(f, {"grid"})[7], (nlohmann::json{{"grid", {{7, 8}, {9}, {nullptr, 7}}}}));
  EXPECT_EQ(all_rows(f, {"grid"})[3], (nlohmann::json{{"grid", {{3, 4}, nlohmann::json::array(), {nullptr, 3}}}}));
  EXPECT_EQ(all_rows(f, {"grid"})[8], (nlohmann::json{{"grid", {{8, 9}, {10}, nullptr}}}));
  EXPECT_EQ(all_rows(f, {"grid"})[5], nlohmann::json::object());
}
TEST_F(ParquetTest, DamageAndWhatHoneDoesNotReadAreErrorsNamingTheFile) {
  // A codec hone lacks is named.
  const ParquetFile lz4(fixture("lz4.parquet"));
  expect_error([&] { lz4.read_rows(0, {"output"}); }, {fixture("lz4.parquet"), "column 'output'", "LZ4_RAW"});
  expect_error([&] { lz4.read_rows(0); }, {fixture("lz4.parquet"), "LZ4_RAW"});

  const auto good = read_bytes(fixture("snappy_v1.parquet"));
  const auto damaged = [&](const std::function<void(std::vector<uint8_t>&)>& change) {
    auto bytes = good;
    change(bytes);
    write_bytes(path("bad.parquet"), bytes);
    return path("bad.parquet");
  };
  expect_error([&] { ParquetFile(damaged([](auto& b) { b[0] = 'X'; })); }, {path("bad.parquet"), "not a Parquet file"});
  expect_error([&] { ParquetFile(damaged([](auto& b) { b[b.size() - 5] = 0x7f; })); }, {path("bad.parquet"), "footer"});
  // A page's bytes overwritten: the decoders notice (or the values differ), never read past the page.
  int noticed = 0, damages = 0;
  for (size_t at = 4; at < 4000; at += 97, ++damages) {
    const std::string bad = damaged([&](auto& b) { b[at] ^= 0x5a; });
    try {
      const ParquetFile f(bad);
      for (size_t g = 0; g < f.row_groups(); ++g) f.read_rows(g, f.column_names());
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
      ++noticed;
    }
  }
  // Most flipped bytes land in headers, levels, lengths or compressed data, which
  // the checks or the decoders notice; some only change a value.
  EXPECT_GT(noticed, damages / 2) << noticed << " of " << damages;
  write_bytes(path("short.parquet"), good.data(), good.size() / 2);
  expect_error([&] { ParquetFile(path("short.parquet")); }, {path("short.parquet")});
}

TEST(Snappy, LiteralsAndOverlappingCopies) {
  // "abcabcabcabcX": a literal "abc", a copy of 9 from 3 back (overlapping), a literal "X".
  const std::vector<uint8_t> block{13, 0x08, 'a', 'b', 'c', 0x15, 0x03, 0x00, 'X'};
  const auto out = data::snappy_decompress(
      {reinterpret_cast<const std::byte*>(block.data()), block.size()}, 13, "block");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(out.data()), out.size()), "abcabcabcabcX");
  expect_error([&] { data::snappy_decompress({reinterpret_cast<const std::byte*>(block.data()), block.size()}, 12, "b"); },
               {"b: a Snappy block of 13 bytes, expected 12"});
  const std::vector<uint8_t> far{4, 0x00, 'a', 0x09, 0x05};  // a copy from 5 back after 1 byte
  expect_error([&] { data::snappy_decompress({reinterpret_cast<const std::byte*>(far.data()), far.size()}, 4, "b"); },
               {"b: a Snappy copy"});
}

}  // namespace
}  // namespace hone::test
