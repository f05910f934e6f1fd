#include "support/mds_fixture.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

namespace hone::test {

namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(char(v >> (8 * i)));
}

}  // namespace

void write_mds_fixture(const std::string& dir, const std::vector<MdsFixtureColumn>& columns,
                       const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> order(columns.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return columns[a].name < columns[b].name; });
  nlohmann::ordered_json config = {{"column_encodings", nlohmann::ordered_json::array()},
                                   {"column_names", nlohmann::ordered_json::array()},
                                   {"column_sizes", nlohmann::ordered_json::array()},
                                   {"compression", nullptr},
                                   {"format", "mds"},
                                   {"hashes", nlohmann::ordered_json::array()},
                                   {"size_limit", 1 << 26},
                                   {"version", 2}};
  for (size_t c : order) {
    config["column_encodings"].push_back(columns[c].encoding);
    config["column_names"].push_back(columns[c].name);
    config["column_sizes"].push_back(columns[c].encoding == "int" ? nlohmann::ordered_json(8) : nlohmann::ordered_json(nullptr));
  }
  std::vector<std::string> samples;
  for (const auto& row : rows) {
    std::string sizes, values;
    for (size_t c : order) {
      if (columns[c].encoding != "int") put_u32(sizes, uint32_t(row[c].size()));
      values += row[c];
    }
    samples.push_back(sizes + values);
  }
  const std::string config_text = config.dump();
  std::string shard;
  put_u32(shard, uint32_t(samples.size()));
  uint32_t offset = uint32_t(4 + 4 * (samples.size() + 1) + config_text.size());
  put_u32(shard, offset);
  for (const std::string& s : samples) put_u32(shard, offset += uint32_t(s.size()));
  shard += config_text;
  for (const std::string& s : samples) shard += s;

  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/shard.00000.mds", std::ios::binary) << shard;
  nlohmann::ordered_json entry = config;
  entry["raw_data"] = {{"basename", "shard.00000.mds"}, {"bytes", shard.size()}, {"hashes", nlohmann::ordered_json::object()}};
  entry["samples"] = samples.size();
  entry["zip_data"] = nullptr;
  nlohmann::ordered_json index = {{"shards", nlohmann::ordered_json::array()}, {"version", 2}};
  index["shards"].push_back(entry);
  std::ofstream(dir + "/index.json") << index.dump();
}

}  // namespace hone::test
