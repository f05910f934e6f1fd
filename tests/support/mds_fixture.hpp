#pragma once
// MDS folders built byte by byte as mosaicml-streaming's MDSWriter lays them
// out (one uncompressed shard), for datasets hone never writes itself: LLM
// Foundry's `bytes` tokens, `text` shards, `prompt`/`response` shards.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace hone::test {

struct MdsFixtureColumn {
  std::string name;
  std::string encoding;  // a variable-size one (str, bytes, json) or int
};

// Writes DIR/index.json and DIR/shard.00000.mds; rows[i][c] is the encoded
// value of columns[c] (int: 8 little-endian bytes). Columns may come in any
// order: the shard stores them sorted by name, as streaming does.
void write_mds_fixture(const std::string& dir, const std::vector<MdsFixtureColumn>& columns,
                       const std::vector<std::vector<std::string>>& rows);

// The bytes of `values` as they lie in memory (numpy's tobytes() on a little-endian machine).
template <typename T>
std::string raw_bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

}  // namespace hone::test
