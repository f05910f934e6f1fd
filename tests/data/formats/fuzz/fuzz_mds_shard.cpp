// libFuzzer target: one MDS shard file, raw or zstd-compressed. Its columns come
// from the config embedded in the shard, completed into an index.json entry, so
// that real shards are valid inputs; otherwise a tokens-only entry is assumed.
#include <zstd.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "hone/core/error.hpp"
#include "hone/data/formats/mds.hpp"

namespace {

using namespace hone::data;

MdsShardInfo entry_for(std::span<const std::byte> shard) {
  nlohmann::json entry = {{"column_encodings", {"ndarray:int32"}}, {"column_names", {"tokens"}},
                          {"column_sizes", {nullptr}}, {"format", "mds"}, {"hashes", nlohmann::json::array()},
                          {"version", 2}};
  uint32_t n = 0, first = 0;
  if (shard.size() >= 8) {
    std::memcpy(&n, shard.data(), 4);
    std::memcpy(&first, shard.data() + 4, 4);
    const uint64_t table_end = 4 + (uint64_t(n) + 1) * 4;
    if (table_end <= first && first <= shard.size()) {
      const auto* text = reinterpret_cast<const char*>(shard.data() + table_end);
      auto config = nlohmann::json::parse(text, text + (first - table_end), nullptr, false);
      if (config.is_object()) entry = config;
    }
  }
  entry["samples"] = n;
  entry["compression"] = nullptr;
  entry["raw_data"] = {{"basename", "shard.00000.mds"}, {"bytes", shard.size()}, {"hashes", nlohmann::json::object()}};
  entry["zip_data"] = nullptr;
  try {
    return parse_mds_shard_info(entry.dump(), "fuzz index entry");
  } catch (const hone::Error&) {
    return parse_mds_shard_info(R"({"column_encodings": ["ndarray:int32"], "column_names": ["tokens"],
        "column_sizes": [null], "compression": null, "format": "mds", "hashes": [], "raw_data": {"basename": "s",
        "bytes": 0, "hashes": {}}, "samples": )" + std::to_string(n) + R"(, "version": 2, "zip_data": null})", "fuzz");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> shard(reinterpret_cast<const std::byte*>(data), size);
  std::vector<std::byte> inflated;
  try {
    if (size >= 4 && std::memcmp(data, "\x28\xb5\x2f\xfd", 4) == 0) {
      // Compressed shards decompress to the size index.json gives; here the frame's own.
      const unsigned long long declared = ZSTD_getFrameContentSize(data, size);
      if (declared > (1u << 20)) return 0;
      inflated = zstd_decompress_exact(shard, declared, "fuzz.mds.zstd");
      shard = inflated;
    }
    for (const char* algorithm : {"xxh32", "xxh64", "xxh3_64", "xxh128"})
      if (mds_hash(algorithm, shard)->empty()) __builtin_trap();
    const MdsShardInfo info = entry_for(shard);
    MdsShard parsed(shard, info, "fuzz.mds");
    std::vector<int32_t> tokens;
    for (uint32_t i = 0; i < parsed.size() && i < 4096; ++i) {
      for (size_t c = 0; c < info.column_names.size(); ++c) {
        try {
          const auto value = parsed.column(i, c);
          if (value.data() < shard.data() || value.data() + value.size() > shard.data() + shard.size())
            __builtin_trap();
          if (info.column_encodings[c].starts_with("ndarray"))
            decode_mds_tokens(value, info.column_encodings[c], tokens, "fuzz");
        } catch (const hone::Error&) {
        }
      }
    }
  } catch (const hone::Error&) {
  }
  return 0;
}
