// libFuzzer target: an MDS index.json.
#include <string_view>

#include "hone/core/error.hpp"
#include "hone/data/formats/mds.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto shards =
        hone::data::parse_mds_index(std::string_view(reinterpret_cast<const char*>(data), size), "index.json");
    for (const auto& shard : shards) {
      const size_t columns = shard.column_names.size();
      if (shard.column_encodings.size() != columns || shard.column_sizes.size() != columns) __builtin_trap();
      if (shard.raw_data.basename.find('/') != std::string::npos) __builtin_trap();
      if (shard.zip_data.has_value() == shard.compression.empty()) __builtin_trap();
    }
  } catch (const hone::Error&) {
  }
  return 0;
}
