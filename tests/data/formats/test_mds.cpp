// MDS shards: the exact bytes of shards and index.json (as streaming's MDSWriter
// writes them), shard splitting, zstd, hashes, and corrupted or truncated files.
#include <sys/wait.h>
#include <zstd.h>

#include <cstring>
#include <fstream>

#include "formats_test.hpp"
#include "hone/data/formats/mds.hpp"
#include "support/mds_fixture.hpp"

namespace hone::test {
namespace {

using data::MdsDataset;
using data::MdsShard;
using data::MdsTokenDType;
using data::MdsValue;
using data::MdsWriter;
using data::MdsWriterOptions;

using MdsTest = FormatsTest;

std::span<const std::byte> as_bytes(const std::vector<uint8_t>& v) {
  return {reinterpret_cast<const std::byte*>(v.data()), v.size()};
}

std::string read_text(const std::string& path) {
  const auto bytes = read_bytes(path);
  return std::string(bytes.begin(), bytes.end());
}

TEST_F(MdsTest, ShardAndIndexMatchStreamingBytes) {
  {
    MdsWriter w(path("out"), {});
    const std::vector<int32_t> a{5, 6}, b{7};
    w.add_document(a);
    w.add_document(b);
    w.finish();
  }
  // json.dumps(config, sort_keys=True) of MDSWriter.get_config().
  const std::string config =
      R"({"column_encodings": ["ndarray:int32"], "column_names": ["tokens"], "column_sizes": [null], )"
      R"("compression": null, "format": "mds", "hashes": [], "size_limit": 67108864, "version": 2})";
  const uint32_t c = uint32_t(config.size());
  std::vector<uint8_t> shard;
  put(shard, uint32_t(2));             // samples
  put(shard, uint32_t(16 + c));        // offsets: after count, 3 offsets and the config
  put(shard, uint32_t(16 + c + 14));
  put(shard, uint32_t(16 + c + 24));
  put_text(shard, config);
  put(shard, uint32_t(10));            // sample 0: size of the tokens value
  shard.insert(shard.end(), {0x04, 0x02});  // ndim 1 << 2 | shape stored as uint8; shape [2]
  put(shard, int32_t(5));
  put(shard, int32_t(6));
  put(shard, uint32_t(6));             // sample 1
  shard.insert(shard.end(), {0x04, 0x01});
  put(shard, int32_t(7));
  EXPECT_EQ(read_bytes(path("out/shard.00000.mds")), shard);
  const std::string index =
      R"({"shards": [{"column_encodings": ["ndarray:int32"], "column_names": ["tokens"], "column_sizes": [null], )"
      R"("compression": null, "format": "mds", "hashes": [], "raw_data": {"basename": "shard.00000.mds", "bytes": )" +
      std::to_string(shard.size()) +
      R"(, "hashes": {}}, "samples": 2, "size_limit": 67108864, "version": 2, "zip_data": null}], "version": 2})";
  EXPECT_EQ(read_text(path("out/index.json")), index);
  EXPECT_EQ(listing(), (std::vector<std::string>{"out", "out/index.json", "out/shard.00000.mds"}));
}

TEST_F(MdsTest, ExtraColumnsAreStoredInSortedOrder) {
  MdsWriterOptions options;
  options.extra_columns = {{"source", "str"}, {"id", "int"}};
  options.hashes = {"xxh64"};
  options.size_limit = 1000;
  {
    MdsWriter w(path("out"), options);
    const std::vector<int32_t> tokens{1};
    const std::vector<MdsValue> extras{std::string("ab"), int64_t(7)};
    w.write(tokens, extras);
    w.finish();
  }
  const std::string config =
      R"({"column_encodings": ["int", "str", "ndarray:int32"], "column_names": ["id", "source", "tokens"], )"
      R"("column_sizes": [8, null, null], "compression": null, "format": "mds", "hashes": ["xxh64"], )"
      R"("size_limit": 1000, "version": 2})";
  const auto shard = read_bytes(path("out/shard.00000.mds"));
  const size_t start = 12 + config.size();
  ASSERT_EQ(shard.size(), start + 24);
  EXPECT_EQ(std::string(shard.begin() + 12, shard.begin() + long(start)), config);
  std::vector<uint8_t> sample;
  put(sample, uint32_t(2));  // sizes of the variable columns: source, tokens
  put(sample, uint32_t(6));
  put(sample, int64_t(7));   // id
  put_text(sample, "ab");    // source
  sample.insert(sample.end(), {0x04, 0x01, 1, 0, 0, 0});
  EXPECT_EQ(std::vector<uint8_t>(shard.begin() + long(start), shard.end()), sample);
  const std::string index = read_text(path("out/index.json"));
  const std::string hash = *data::mds_hash("xxh64", as_bytes(shard));
  EXPECT_NE(index.find(R"("raw_data": {"basename": "shard.00000.mds", "bytes": )" + std::to_string(shard.size()) +
                       R"(, "hashes": {"xxh64": ")" + hash + R"("}})"),
            std::string::npos)
      << index;
  MdsDataset ds(path("out"));
  EXPECT_EQ(ds.integer(0, "id"), 7);
  EXPECT_EQ(ds.str(0, "source"), "ab");
  expect_error([&] { ds.integer(0, "source"); }, {"shard.00000.mds: sample 0, column 'source'", "expected 'int'"});
  expect_error([&] { ds.str(0, "nope"); }, {path("out"), "no column 'nope'"});
}

TEST_F(MdsTest, ColumnNamesAreEscapedAsPythonDoes) {
  MdsWriterOptions options;
  options.extra_columns = {{"caf\xc3\xa9 \xe2\x98\x95 \xf0\x9f\x98\x80 \"q\"\t\x7f", "int"}};
  {
    MdsWriter w(path("out"), options);
    w.finish();
  }
  // No sample, no shard: the config is checked through a one-sample dataset.
  {
    MdsWriter w(path("out2"), options);
    const std::vector<int32_t> tokens{1};
    const std::vector<MdsValue> extras{int64_t(1)};
    w.write(tokens, extras);
    w.finish();
  }
  const std::string shard = read_text(path("out2/shard.00000.mds"));
  EXPECT_NE(shard.find(R"("column_names": ["caf\u00e9 \u2615 \ud83d\ude00 \"q\"\t\u007f", "tokens"])"),
            std::string::npos)
      << shard;
  EXPECT_EQ(read_text(path("out/index.json")), R"({"shards": [], "version": 2})");
}

TEST_F(MdsTest, Uint16TokensAndLongShapes) {
  MdsWriterOptions options;
  options.tokens = MdsTokenDType::u16;
  options.vocab_size = 65536;
  std::vector<int32_t> long_doc(300), huge_doc(70000);
  for (size_t i = 0; i < long_doc.size(); ++i) long_doc[i] = int32_t(i * 200 % 65536);
  for (size_t i = 0; i < huge_doc.size(); ++i) huge_doc[i] = int32_t(i % 65536);
  {
    MdsWriter w(path("out"), options);
    w.add_document(long_doc);
    w.add_document(huge_doc);
    w.finish();
  }
  const auto shard = read_bytes(path("out/shard.00000.mds"));
  const uint32_t first = uint32_t(shard[4]) | uint32_t(shard[5]) << 8;
  // sample 0: size 1 + 2 + 600, then ndim 1 << 2 | shape as uint16, shape 300
  EXPECT_EQ(std::vector<uint8_t>(shard.begin() + first, shard.begin() + first + 7),
            (std::vector<uint8_t>{0x5b, 0x02, 0, 0, 0x05, 0x2c, 0x01}));
  MdsDataset ds(path("out"));
  EXPECT_EQ(ds.tokens(0), long_doc);
  EXPECT_EQ(ds.tokens(1), huge_doc);  // shape stored as uint32
}

// The size of json.dumps(config) for one int32 tokens column, no compression, no hashes.
size_t tokens_config_size(uint64_t size_limit) {
  return std::string(R"({"column_encodings": ["ndarray:int32"], "column_names": ["tokens"], "column_sizes": [null], )"
                     R"("compression": null, "format": "mds", "hashes": [], "size_limit": , "version": 2})")
             .size() +
         std::to_string(size_limit).size();
}

TEST_F(MdsTest, ShardsSplitWhereStreamingSplitsThem) {
  // A 10-token int32 sample costs 4 (size) + 2 (ndarray header) + 40 + 4 (offset) = 50
  // bytes; a shard costs 8 + the config. A limit of exactly three samples must put
  // three in each shard: streaming splits when limit < shard size + sample.
  uint64_t limit = 0;
  for (uint64_t guess = 100; guess < 1000; ++guess)
    if (guess == 8 + tokens_config_size(guess) + 3 * 50) limit = guess;
  ASSERT_GT(limit, 0u);
  MdsWriterOptions options;
  options.size_limit = limit;
  std::vector<std::vector<int32_t>> docs;
  {
    MdsWriter w(path("out"), options);
    for (int d = 0; d < 10; ++d) {
      docs.push_back(std::vector<int32_t>(10, d));
      w.add_document(docs.back());
    }
    w.add_document({});
    EXPECT_EQ(w.skipped_empty(), 1u);
    EXPECT_EQ(w.samples(), 10u);
    w.finish();
  }
  MdsDataset ds(path("out"));
  ASSERT_EQ(ds.shards().size(), 4u);
  for (size_t s = 0; s < 4; ++s) {
    EXPECT_EQ(ds.shards()[s].samples, s < 3 ? 3u : 1u);
    EXPECT_EQ(ds.shards()[s].raw_data.basename, fmt::format("shard.{:05}.mds", s));
    EXPECT_LE(ds.shards()[s].raw_data.bytes, limit);
  }
  ASSERT_EQ(ds.size(), 10u);
  for (uint64_t i = 0; i < 10; ++i) EXPECT_EQ(ds.tokens(i), docs[i]);
  expect_error([&] { ds.tokens(10); }, {path("out"), "sample 10 out of range"});
}

TEST_F(MdsTest, ZstdShardsRoundTripAndVerifyHashes) {
  MdsWriterOptions options;
  options.compression = "zstd:7";
  options.hashes = {"xxh3_64", "xxh64"};
  options.size_limit = 2000;
  std::vector<std::vector<int32_t>> docs;
  {
    MdsWriter w(path("out"), options);
    for (int d = 0; d < 40; ++d) {
      docs.push_back(std::vector<int32_t>(size_t(5 + d), d * 1000));
      w.add_document(docs.back());
    }
    w.finish();
  }
  MdsDataset ds(path("out"));
  ASSERT_GT(ds.shards().size(), 2u);
  for (const auto& shard : ds.shards()) {
    EXPECT_EQ(shard.compression, "zstd:7");
    ASSERT_TRUE(shard.zip_data.has_value());
    EXPECT_EQ(shard.zip_data->basename, shard.raw_data.basename + ".zstd");
    EXPECT_FALSE(fs::exists(path("out/" + shard.raw_data.basename)));  // streaming writes only the zip
    EXPECT_EQ(shard.raw_data.hashes.size(), 2u);
    // The frame records its size, which streaming's zstd.decompress needs.
    const auto zip = read_bytes(path("out/" + shard.zip_data->basename));
    EXPECT_EQ(ZSTD_getFrameContentSize(zip.data(), zip.size()), shard.raw_data.bytes);
    EXPECT_EQ(*data::mds_hash("xxh64", as_bytes(zip)), shard.zip_data->hashes.at("xxh64"));
  }
  for (uint64_t i = 0; i < docs.size(); ++i) EXPECT_EQ(ds.tokens(i), docs[i]);
}

// How many mappings of files under `folder` this process holds.
size_t mappings_under(const std::string& folder) {
  std::ifstream maps("/proc/self/maps");
  size_t count = 0;
  for (std::string line; std::getline(maps, line);) count += line.find(folder + "/") != std::string::npos;
  return count;
}

// Writes `count` documents of growing length (`first_length` + d tokens of d) into `folder`.
std::vector<std::vector<int32_t>> write_documents(const std::string& folder, const MdsWriterOptions& options,
                                                  int count, size_t first_length) {
  std::vector<std::vector<int32_t>> docs;
  MdsWriter w(folder, options);
  for (int d = 0; d < count; ++d) {
    docs.push_back(std::vector<int32_t>(first_length + size_t(d), d));
    w.add_document(docs.back());
  }
  w.finish();
  return docs;
}

TEST_F(MdsTest, OpenShardsStayWithinTheLimit) {
  // One mapping per shard ran out of mappings past ~65k shards (vm.max_map_count).
  MdsWriterOptions options;
  options.size_limit = 400;
  const auto docs = write_documents(path("out"), options, 40, 20);
  MdsDataset ds(path("out"), true, {.open_shards = 3});
  ASSERT_GT(ds.shards().size(), 10u);
  for (int pass = 0; pass < 2; ++pass) {
    for (uint64_t k = 0; k < docs.size(); ++k) {
      const uint64_t i = (k * 7 + uint64_t(pass)) % docs.size();  // jumping between shards
      EXPECT_EQ(ds.tokens(i), docs[i]);
      EXPECT_LE(mappings_under(path("out")), 3u);
    }
  }
  EXPECT_GE(mappings_under(path("out")), 1u);  // the count sees hone's mappings
}

TEST_F(MdsTest, DecompressedShardsStayWithinTheirMemory) {
  MdsWriterOptions options;
  options.compression = "zstd";
  options.hashes = {"xxh64"};
  options.size_limit = 1000;
  const auto docs = write_documents(path("out"), options, 30, 40);
  const size_t shards = MdsDataset(path("out")).shards().size();
  ASSERT_GT(shards, 4u);
  // A budget of two shards: reading in order opens each once, quietly.
  MdsDataset ds(path("out"), true, {.decompressed_bytes = 2000});
  ::testing::internal::CaptureStderr();
  for (uint64_t i = 0; i < docs.size(); ++i) EXPECT_EQ(ds.tokens(i), docs[i]);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  // Going back decompresses closed shards again, which is said once.
  ::testing::internal::CaptureStderr();
  for (uint64_t i = docs.size(); i-- > 0;) EXPECT_EQ(ds.tokens(i), docs[i]);
  for (uint64_t i = 0; i < docs.size(); ++i) EXPECT_EQ(ds.tokens(i), docs[i]);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find(path("out") + ": its decompressed shards take more than the 2e-06 GB"), std::string::npos)
      << said;
  EXPECT_NE(said.find("zstd -d"), std::string::npos) << said;
  EXPECT_EQ(said.find("note:"), said.rfind("note:")) << said;
}

TEST_F(MdsTest, HashesMatchPythonXxhashHexDigests) {
  EXPECT_EQ(*data::mds_hash("xxh32", {}), "02cc5d05");
  EXPECT_EQ(*data::mds_hash("xxh64", {}), "ef46db3751d8e999");
  EXPECT_EQ(*data::mds_hash("xxh3_64", {}), "2d06800538d394c2");
  EXPECT_EQ(*data::mds_hash("xxh128", {}), "99aa06d3014798d86001c324468d497f");
  EXPECT_FALSE(data::mds_hash("sha1", {}).has_value());  // not hone's to verify
}

class MdsDamageTest : public MdsTest {
 protected:
  void write(const std::string& compression) {
    MdsWriterOptions options;
    options.compression = compression;
    options.hashes = {"xxh64"};
    MdsWriter w(path("out"), options);
    for (int d = 0; d < 5; ++d) w.add_document(std::vector<int32_t>(20, d + 1));
    w.finish();
    shard_ = path(compression.empty() ? "out/shard.00000.mds" : "out/shard.00000.mds.zstd");
  }
  std::string shard_;
};

TEST_F(MdsDamageTest, CorruptedShardFailsItsHash) {
  write("");
  auto bytes = read_bytes(shard_);
  bytes[bytes.size() - 3] ^= 1;  // bit 8 of the last sample's last token
  write_bytes(shard_, bytes);
  expect_error([&] { MdsDataset(path("out")).tokens(0); }, {shard_, "xxh64 is", "corrupted"});
  // Without verification the flipped bit reads through.
  EXPECT_EQ(MdsDataset(path("out"), false).tokens(4).back(), 5 ^ 256);
}

TEST_F(MdsDamageTest, TruncatedShard) {
  write("");
  auto bytes = read_bytes(shard_);
  bytes.resize(bytes.size() - 3);
  write_bytes(shard_, bytes);
  expect_error([&] { MdsDataset(path("out"), false).tokens(0); }, {shard_, "bytes, index.json says", "truncated"});
  // The shard parser alone finds the offsets running past the end.
  const auto index = data::parse_mds_index(read_text(path("out/index.json")), "index.json");
  expect_error([&] { MdsShard(as_bytes(bytes), index[0], shard_); },
               {shard_, "sample 4 ends at byte", "truncated?"});
}

// The config a shard holds describes the columns index.json gives it (were: names and encodings alone compared).
TEST_F(MdsDamageTest, AShardsConfigMatchesTheIndex) {
  write("");
  const auto bytes = read_bytes(shard_);
  auto index = data::parse_mds_index(read_text(path("out/index.json")), "index.json");
  EXPECT_NO_THROW(MdsShard(as_bytes(bytes), index[0], shard_));
  index[0].column_sizes[0] = 12345;
  expect_error([&] { MdsShard(as_bytes(bytes), index[0], shard_); },
               {shard_, "the shard's config has column_sizes [null], index.json has [12345]"});
}

TEST_F(MdsDamageTest, TruncatedZstdShard) {
  write("zstd");
  auto bytes = read_bytes(shard_);
  bytes.resize(bytes.size() - 3);
  write_bytes(shard_, bytes);
  expect_error([&] { MdsDataset(path("out"), false).tokens(0); }, {shard_, "index.json says", "truncated"});
  const auto index = data::parse_mds_index(read_text(path("out/index.json")), "index.json");
  expect_error([&] { data::zstd_decompress_exact(as_bytes(bytes), index[0].raw_data.bytes, shard_); },
               {shard_, "corrupt zstd data"});
  expect_error([&] { data::zstd_decompress_exact(as_bytes(bytes), 10, shard_); }, {shard_, "index.json says 10"});
}

TEST_F(MdsDamageTest, MissingShard) {
  write("");
  fs::remove(shard_);
  expect_error([&] { MdsDataset(path("out")).tokens(0); }, {shard_, "cannot open"});
}

TEST_F(MdsTest, ShardHeaderAndSampleChecks) {
  {
    MdsWriter w(path("out"), {});
    w.add_document(std::vector<int32_t>{1, 2, 3});
    w.add_document(std::vector<int32_t>{4});
    w.finish();
  }
  const auto index = data::parse_mds_index(read_text(path("out/index.json")), "index.json");
  const auto good = read_bytes(path("out/shard.00000.mds"));
  const std::string name = "shard.00000.mds";
  auto damaged = [&](size_t offset, uint32_t value) {
    auto bytes = good;
    std::memcpy(bytes.data() + offset, &value, 4);
    return bytes;
  };
  expect_error([&] { MdsShard(as_bytes(damaged(0, 3)), index[0], name); }, {name, "holds 3 samples (byte 0)", "says 2"});
  expect_error([&] { MdsShard(as_bytes(damaged(0, 0x40000000)), index[0], name); }, {name, "holds 1073741824"});
  expect_error([&] { MdsShard(as_bytes(damaged(4, 3)), index[0], name); }, {name, "sample 0 starts at byte 3"});
  expect_error([&] { MdsShard(as_bytes(damaged(8, 2)), index[0], name); }, {name, "sample 0 ends at byte 2"});
  auto config = good;
  const std::string text(config.begin(), config.end());
  config[text.find("\"tokens\"") + 1] = 'T';
  expect_error([&] { MdsShard(as_bytes(config), index[0], name); }, {name, "column_names [\"Tokens\"]"});
  // Sample 0's tokens value claims one more byte than the sample holds.
  uint32_t first;
  std::memcpy(&first, good.data() + 4, 4);
  const auto oversized = damaged(first, 15);  // MdsShard views these bytes; they must outlive it
  MdsShard shard(as_bytes(oversized), index[0], name);
  expect_error([&] { shard.column(0, 0); }, {name, "sample 0", "column sizes add up to 15"});
  EXPECT_EQ(shard.column(1, 0).size(), 6u);
  expect_error([&] { shard.column(2, 0); }, {name, "sample 2 out of range"});
  std::vector<uint8_t> tiny{1, 0};
  expect_error([&] { MdsShard(as_bytes(tiny), index[0], name); }, {name, "too short"});
}

TEST_F(MdsTest, NdarrayTokenDecoding) {
  std::vector<int32_t> out;
  const std::vector<uint8_t> dynamic_dtype{16, 0x04, 2, 0x34, 0x12, 1, 0};  // uint16 code, shape [2]
  data::decode_mds_tokens(as_bytes(dynamic_dtype), "ndarray", out, "v");
  EXPECT_EQ(out, (std::vector<int32_t>{0x1234, 1}));
  const std::vector<uint8_t> static_shape{9, 0, 0, 0, 8, 0, 0, 0};  // int32 [2], nothing stored per value
  data::decode_mds_tokens(as_bytes(static_shape), "ndarray:int32:2", out, "v");
  EXPECT_EQ(out, (std::vector<int32_t>{9, 8}));
  const std::vector<uint8_t> two_dims{0x08, 1, 2, 5, 6};  // uint8, ndim 2, shape [1, 2]
  data::decode_mds_tokens(as_bytes(two_dims), "ndarray:uint8", out, "v");
  EXPECT_EQ(out, (std::vector<int32_t>{5, 6}));
  expect_error([&] { data::decode_mds_tokens(as_bytes(static_shape), "ndarray:float32:2", out, "v"); },
               {"v: ndarray of float32", "integer"});
  expect_error([&] { data::decode_mds_tokens(as_bytes(static_shape), "ndarray:int32:3", out, "v"); },
               {"v:", "3 elements of int32 need 12 bytes"});
  const std::vector<uint8_t> no_shape{0x10};  // ndim 4, but no shape follows
  expect_error([&] { data::decode_mds_tokens(as_bytes(no_shape), "ndarray:uint32", out, "v"); },
               {"v:", "shape byte 0x10 declares 4 dimensions"});
  const std::vector<uint8_t> negative{0x04, 1, 0xff, 0xff, 0xff, 0xff};
  expect_error([&] { data::decode_mds_tokens(as_bytes(negative), "ndarray:int32", out, "v"); },
               {"v: element 0 is -1"});
  expect_error([&] { data::decode_mds_tokens(as_bytes(negative), "str", out, "v"); },
               {"v: encoding 'str' is not an ndarray of token ids"});
}

TEST_F(MdsTest, BytesTokensAreReadAsTheirTokenEncodingType) {
  // LLM Foundry's concat_tokens shards before its NDArray columns: numpy int64 tobytes().
  write_mds_fixture(path("int64"), {{"tokens", "bytes"}},
                    {{raw_bytes<int64_t>({5, 70000, 0})}, {raw_bytes<int64_t>({1})}});
  MdsDataset foundry(path("int64"));
  EXPECT_EQ(foundry.tokens(0), (std::vector<int32_t>{5, 70000, 0}));
  EXPECT_EQ(foundry.tokens(1), std::vector<int32_t>{1});

  // Other encodings are given by name (LLM Foundry's token_encoding_type).
  write_mds_fixture(path("int32"), {{"tokens", "bytes"}}, {{raw_bytes<int32_t>({7, 8, 9})}});
  EXPECT_EQ(MdsDataset(path("int32")).tokens(0, "int32"), (std::vector<int32_t>{7, 8, 9}));
  write_mds_fixture(path("uint16"), {{"tokens", "bytes"}}, {{raw_bytes<uint16_t>({65535, 3})}});
  EXPECT_EQ(MdsDataset(path("uint16")).tokens(0, "uint16"), (std::vector<int32_t>{65535, 3}));

  // Read with the wrong type, the tokens fail to divide or are not token ids;
  // either error names the type they were read as.
  expect_error([&] { MdsDataset(path("int32")).tokens(0); },
               {"shard.00000.mds: sample 0, column 'tokens'", "12 bytes are not a whole number of token ids",
                "read as int64: set dataset.token_encoding_type"});
  write_mds_fixture(path("pair"), {{"tokens", "bytes"}}, {{raw_bytes<int32_t>({7, 8})}});
  expect_error([&] { MdsDataset(path("pair")).tokens(0); },
               {"element 0 is 34359738375, not a token id", "read as int64: set dataset.token_encoding_type"});
  expect_error([&] { MdsDataset(path("int32")).tokens(0, "float32"); }, {"'float32' is not an integer dtype"});
}

TEST_F(MdsTest, IndexJsonChecks) {
  const std::string p = "ds/index.json";
  auto shard_entry = [](const std::string& replace_from, const std::string& replace_to) {
    std::string entry =
        R"({"column_encodings": ["ndarray:int32", "int"], "column_names": ["tokens", "id"], "column_sizes": [null, 8], )"
        R"("compression": null, "format": "mds", "hashes": [], "raw_data": {"basename": "shard.00000.mds", "bytes": 40, )"
        R"("hashes": {}}, "samples": 2, "size_limit": null, "version": 2, "zip_data": null})";
    if (!replace_from.empty()) entry.replace(entry.find(replace_from), replace_from.size(), replace_to);
    return R"({"shards": [)" + entry + R"(], "version": 2})";
  };
  EXPECT_EQ(data::parse_mds_index(shard_entry("", ""), p).at(0).column_sizes[1], 8u);
  expect_error([&] { data::parse_mds_index("[1, 2]", p); }, {p, "not a JSON object"});
  // A file cut short (a copy that stopped) says where it ends.
  expect_error([&] { data::parse_mds_index(R"({"shards": [{"column_encodings")", p); },
               {p, "not valid JSON (byte 32: ", "unexpected end of input"});
  expect_error([&] { data::parse_mds_index(R"({"shards": [], "version": 3})", p); }, {p, "version 3, expected 2"});
  expect_error([&] { data::parse_mds_index(shard_entry(R"("mds")", R"("json")"), p); },
               {p + ": shards[0]", "format \"json\""});
  expect_error([&] { data::parse_mds_index(shard_entry("shard.00000.mds", "../x.mds"), p); },
               {"shards[0].raw_data", "'../x.mds' is not a plain file name"});
  expect_error([&] { data::parse_mds_index(shard_entry(R"("samples": 2, )", ""), p); },
               {"shards[0]", "no key 'samples'"});
  expect_error([&] { data::parse_mds_index(shard_entry("[null, 8]", "[null, null]"), p); },
               {"shards[0]", "column 'id' (int) has size null", "8"});
  expect_error([&] { data::parse_mds_index(shard_entry(R"(["tokens", "id"])", R"(["tokens"])"), p); },
               {"shards[0]", "1 column names, 2 encodings"});
  expect_error([&] { data::parse_mds_index(shard_entry(R"("zip_data": null)", R"("zip_data": {"basename": "z", "bytes": 1, "hashes": {}})"), p); },
               {"shards[0]", "compression is null but zip_data is set"});
  expect_error([&] { data::parse_mds_index(shard_entry(R"("bytes": 40)", R"("bytes": 4294967296)"), p); },
               {"shards[0]", "raw_data.bytes 4294967296"});
  expect_error([&] { data::parse_mds_index(shard_entry(R"("samples": 2)", R"("samples": 4611686018427387904)"), p); },
               {"shards[0]", "samples 4611686018427387904 do not fit raw_data.bytes 40"});
  expect_error([&] { data::parse_mds_index(shard_entry(R"("bytes": 40)", R"("bytes": -1)"), p); },
               {"shards[0].raw_data", "'bytes' is number, expected a non-negative integer"});
}

TEST_F(MdsTest, WriterOptionChecks) {
  auto with = [&](auto change) {
    MdsWriterOptions options;
    change(options);
    return [options, this] { MdsWriter(path("out"), options); };
  };
  expect_error(with([](auto& o) { o.compression = "gz"; }), {path("out"), "compression 'gz'"});
  expect_error(with([](auto& o) { o.compression = "zstd:23"; }), {path("out"), "zstd:23"});
  expect_error(with([](auto& o) { o.hashes = {"xxh64", "xxh32"}; }), {path("out"), "sorted"});
  expect_error(with([](auto& o) { o.hashes = {"md5"}; }), {path("out"), "hash 'md5'"});
  expect_error(with([](auto& o) { o.extra_columns = {{"tokens", "str"}}; }), {path("out"), "'tokens' appears twice"});
  expect_error(with([](auto& o) { o.extra_columns = {{"score", "float32"}}; }), {path("out"), "str or int"});
  expect_error(with([](auto& o) {
                 o.tokens = MdsTokenDType::u16;
                 o.vocab_size = 128256;
               }),
               {path("out"), "128256", "ndarray:uint16"});
  EXPECT_TRUE(listing().empty());

  MdsWriterOptions u16;
  u16.tokens = MdsTokenDType::u16;
  MdsWriter w(path("out"), u16);
  expect_error([&] { w.add_document(std::vector<int32_t>{1, 70000}); },
               {path("out"), "document 0", "70000", "position 1", "uint16"});
  expect_error([&] { w.add_document(std::vector<int32_t>{1, 2}, std::vector<int32_t>{1, 1}); },
               {path("out"), "whole document"});
  expect_error([&] { w.write(std::vector<int32_t>{1}, std::vector<MdsValue>{int64_t(1)}); },
               {path("out"), "1 extra column values, expected 0"});
}

TEST_F(MdsTest, OutputFolderMustBeNewOrEmpty) {
  fs::create_directories(path("full"));
  write_text(path("full/old.txt"), "x");
  expect_error([&] { MdsWriter(path("full"), {}); }, {path("full"), "not an empty folder"});
  fs::create_directories(path("empty"));
  {
    MdsWriter w(path("empty") + "/", {});
    w.add_document(std::vector<int32_t>{1});
    w.finish();
  }
  EXPECT_EQ(MdsDataset(path("empty")).tokens(0), std::vector<int32_t>{1});
}

TEST_F(MdsTest, InterruptedWriteLeavesNoFinishedDataset) {
  MdsWriterOptions options;
  options.size_limit = 300;  // several shards reach the disk before the "crash"
  {
    MdsWriter w(path("out"), options);
    for (int d = 0; d < 50; ++d) w.add_document(std::vector<int32_t>(20, d));
  }
  EXPECT_TRUE(listing().empty());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    MdsWriter w(path("out"), options);
    for (int d = 0; d < 50; ++d) w.add_document(std::vector<int32_t>(20, d));
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_FALSE(fs::exists(path("out")));
  const auto names = listing();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names[0], ".out.tmp." + std::to_string(child));
  for (const auto& name : names) EXPECT_EQ(name.find("index.json"), std::string::npos) << name;
  // The next writer of the folder removes what the exited one left.
  {
    MdsWriter w(path("out"), options);
    w.add_document(std::vector<int32_t>{1});
    w.finish();
  }
  EXPECT_FALSE(fs::exists(path(".out.tmp." + std::to_string(child))));
  EXPECT_EQ(MdsDataset(path("out")).tokens(0), std::vector<int32_t>{1});
}

}  // namespace
}  // namespace hone::test
