// Writes Megatron and MDS datasets with hone, plus expected.json describing their
// contents, for check_compat.py to read the way Megatron-LM and streaming do.
// Usage: formats_compat_writer OUT_DIR
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hone/core/error.hpp"
#include "hone/data/formats/mds.hpp"
#include "hone/data/formats/megatron.hpp"

namespace {

using nlohmann::json;
using namespace hone::data;

struct Lcg {
  uint64_t state;
  uint64_t operator()(uint64_t bound) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % bound;
  }
};

// Documents as lists of sequences; some empty, some split in several sequences.
json write_megatron(const std::string& dir, const std::string& name, MegatronDType dtype, uint64_t vocab,
                    uint64_t seed) {
  Lcg next{seed};
  MegatronWriter writer(dir + "/" + name, dtype, vocab);
  json documents = json::array();
  for (int d = 0; d < 60; ++d) {
    json sequences = json::array();
    std::vector<int32_t> tokens, lengths;
    const uint64_t count = d % 7 == 3 ? 0 : 1 + next(3);
    for (uint64_t s = 0; s < count; ++s) {
      std::vector<int32_t> seq(1 + next(40));
      for (int32_t& t : seq) t = int32_t(next(vocab));
      tokens.insert(tokens.end(), seq.begin(), seq.end());
      lengths.push_back(int32_t(seq.size()));
      sequences.push_back(seq);
    }
    writer.add_document(tokens, lengths);
    documents.push_back(sequences);
  }
  writer.finish();
  return {{"prefix", name}, {"dtype", megatron_dtype_name(dtype)}, {"documents", documents}};
}

json write_mds(const std::string& dir, const std::string& name, const MdsWriterOptions& options, uint64_t seed) {
  Lcg next{seed};
  MdsWriter writer(dir + "/" + name, options);
  const uint64_t vocab = options.tokens == MdsTokenDType::u16 ? 65536 : 200000;
  const char* sources[] = {"wiki", "caf\xc3\xa9 \xe2\x98\x95", "\xf0\x9f\x98\x80 emoji", ""};
  json samples = json::array();
  for (int d = 0; d < 80; ++d) {
    // Lengths cross the 256 boundary where NDArray stores the shape as uint16.
    std::vector<int32_t> tokens(1 + next(d % 10 == 0 ? 400 : 60));
    for (int32_t& t : tokens) t = int32_t(next(vocab));
    json sample = {{"tokens", tokens}};
    std::vector<MdsValue> extras;
    for (const MdsColumn& column : options.extra_columns) {
      if (column.encoding == "int") {
        const int64_t value = (int64_t(next(1u << 30)) << 20) * (d % 2 ? -1 : 1);
        extras.emplace_back(value);
        sample[column.name] = value;
      } else {
        extras.emplace_back(std::string(sources[d % 4]));
        sample[column.name] = sources[d % 4];
      }
    }
    writer.write(tokens, extras);
    samples.push_back(sample);
  }
  writer.finish();
  json columns = json::object();
  for (const MdsColumn& column : options.extra_columns) columns[column.name] = column.encoding;
  return {{"dir", name},
          {"tokens_encoding", options.tokens == MdsTokenDType::u16 ? "ndarray:uint16" : "ndarray:int32"},
          {"extra_columns", columns},
          {"compression", options.compression.empty() ? json(nullptr) : json(options.compression)},
          {"hashes", options.hashes},
          {"size_limit", options.size_limit ? json(options.size_limit) : json(nullptr)},
          {"samples", samples}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  try {
    std::filesystem::create_directories(dir);
    json expected;
    expected["megatron"] = {write_megatron(dir, "gpt2_text_document", MegatronDType::u16, 50257, 1),
                            write_megatron(dir, "llama3_text_document", MegatronDType::i32, 128256, 2)};
    MdsWriterOptions plain;
    plain.extra_columns = {{"source", "str"}, {"id", "int"}};
    plain.hashes = {"xxh64"};
    plain.size_limit = 3000;  // several shards
    MdsWriterOptions zstd;
    zstd.tokens = MdsTokenDType::u16;
    zstd.compression = "zstd:7";
    zstd.hashes = {"xxh64"};
    zstd.size_limit = 5000;
    MdsWriterOptions single;
    single.size_limit = 0;  // no limit: one shard
    expected["mds"] = {write_mds(dir, "mds_int32", plain, 3), write_mds(dir, "mds_uint16_zstd", zstd, 4),
                       write_mds(dir, "mds_one_shard", single, 5)};
    std::ofstream(dir + "/expected.json") << expected.dump(1);
  } catch (const hone::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  return 0;
}
