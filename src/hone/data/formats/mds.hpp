#pragma once
// MosaicML Streaming's MDS format (streaming/base/format/mds): a folder with
// index.json and shards shard.NNNNN.mds (or .mds.zstd). Each shard is
//   u32 sample count n | u32 offsets[n+1] | config JSON | samples,
// each sample is u32 sizes of its variable-size columns, then the column values
// in sorted column-name order. Layout and encodings in docs/formats.md.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "hone/data/formats/token_writer.hpp"

namespace hone::data {

// The `tokens` column: "ndarray:int32" or "ndarray:uint16" (static dtype, the length
// stored per sample), as LLM Foundry's convert scripts write it.
enum class MdsTokenDType { i32, u16 };

// An extra column that hone writes: encoding "str" (UTF-8) or "int" (int64).
struct MdsColumn {
  std::string name;
  std::string encoding;
};
using MdsValue = std::variant<int64_t, std::string>;

struct MdsWriterOptions {
  MdsTokenDType tokens = MdsTokenDType::i32;
  std::vector<MdsColumn> extra_columns;
  std::string compression;              // "", "zstd" (level 3) or "zstd:LEVEL" (1..22)
  std::vector<std::string> hashes;      // sorted names from xxh32, xxh64, xxh3_64, xxh128
  uint64_t size_limit = uint64_t(1) << 26;  // shard bytes; 0 puts everything in one shard
  uint64_t vocab_size = 0;              // checked against `tokens` when > 0
};

// Writes shards into a hidden sibling folder DIR.tmp (see the .cpp) and renames it
// to DIR after index.json, so DIR appears complete or not at all. DIR must not
// exist or be empty. Shard boundaries follow streaming's MDSWriter exactly.
class MdsWriter final : public TokenWriter {
 public:
  MdsWriter(std::string dir, MdsWriterOptions options);
  ~MdsWriter() override;

  // One sample holding `tokens`; only for writers without extra columns. MDS cannot
  // store an empty array, so empty documents are skipped (and counted).
  void add_document(std::span<const int32_t> tokens, std::span<const int32_t> sequence_lengths = {}) override;
  // One sample; `extras` holds one value per extra column, in the options' order.
  void write(std::span<const int32_t> tokens, std::span<const MdsValue> extras);
  void finish() override;

  uint64_t samples() const { return samples_; }
  uint64_t skipped_empty() const { return skipped_empty_; }

 private:
  void flush_shard();

  std::string dir_, temp_dir_;
  MdsWriterOptions options_;
  int zstd_level_ = 0;
  std::vector<std::string> names_, encodings_;  // sorted by name, as streaming orders columns
  std::vector<int> extra_of_column_;             // index into `extras`, -1 for tokens
  std::string config_;
  std::vector<std::byte> shard_samples_, sample_;
  std::vector<uint32_t> shard_sizes_;
  uint64_t shard_estimate_ = 0;  // streaming's running shard size
  std::string shards_json_;      // index.json entries so far, comma-separated
  uint64_t shards_ = 0, samples_ = 0, skipped_empty_ = 0;
  bool finished_ = false;
};

struct MdsFileInfo {
  std::string basename;
  uint64_t bytes = 0;
  std::map<std::string, std::string> hashes;  // algorithm -> hex digest
};

// One entry of index.json's "shards", validated.
struct MdsShardInfo {
  bool has_column(std::string_view name) const {
    return std::find(column_names.begin(), column_names.end(), name) != column_names.end();
  }

  std::vector<std::string> column_names, column_encodings;
  std::vector<std::optional<uint64_t>> column_sizes;  // fixed size, or none: u32 size per sample
  std::string compression;                           // "" when none
  std::vector<std::string> hashes;
  uint64_t samples = 0;
  MdsFileInfo raw_data;
  std::optional<MdsFileInfo> zip_data;
};

// Parses index.json text; `path` names it in errors.
std::vector<MdsShardInfo> parse_mds_index(std::string_view text, const std::string& path);
// Parses one shard entry (an object of index.json's "shards"); `where` names it in errors.
MdsShardInfo parse_mds_shard_info(std::string_view json_text, const std::string& where);

// A validated view of one uncompressed shard's bytes.
class MdsShard {
 public:
  // Checks the sample count against `info`, the offset table against the size, and
  // that the embedded config names the same columns.
  MdsShard(std::span<const std::byte> data, const MdsShardInfo& info, std::string name);

  uint32_t size() const { return count_; }
  // The encoded value of column c of sample i, bounds-checked against the sample.
  std::span<const std::byte> column(uint32_t i, size_t c) const;

 private:
  std::span<const std::byte> data_;
  const MdsShardInfo* info_;
  std::string name_;
  uint32_t count_ = 0;
};

// How a `tokens` column of encoding "bytes" is read: raw little-endian integers of
// this numpy dtype name (int8 ... uint64). LLM Foundry's concat_tokens datasets
// before its NDArray columns hold int64, which its `token_encoding_type` defaults to.
inline constexpr std::string_view kDefaultBytesTokenType = "int64";

// Decodes a `tokens` value into token ids: an "ndarray[:DTYPE[:SHAPE]]" of
// integers, or "bytes" of raw `bytes_dtype` integers. `where` (file, sample,
// column) prefixes errors.
void decode_mds_tokens(std::span<const std::byte> value, std::string_view encoding, std::vector<int32_t>& out,
                       const std::string& where, std::string_view bytes_dtype = kDefaultBytesTokenType);

// Hex digest of `data` under a hash of python-xxhash's naming (xxh32, xxh64,
// xxh3_64, xxh128), as streaming stores them; nullopt for algorithms hone lacks.
std::optional<std::string> mds_hash(std::string_view algorithm, std::span<const std::byte> data);

// Decompresses a zstd shard whose size is known from index.json.
std::vector<std::byte> zstd_decompress_exact(std::span<const std::byte> data, uint64_t size, const std::string& name);

// A folder of MDS shards (a split folder of a streaming dataset). Shards are opened
// on first use: mapped when the raw .mds is present, else decompressed from
// .mds.zstd. Known hashes are verified the first time a shard is opened when
// `verify_hashes`. The least recently used shards are closed again beyond
// `limits`: a process may hold only so many mappings (vm.max_map_count, 65530 by
// default) and decompressed shards live in memory. Safe to read from several threads.
struct MdsCacheLimits {
  size_t open_shards = 1024;
  uint64_t decompressed_bytes = 0;  // 0: a quarter of this machine's memory
};

class MdsDataset {
 public:
  explicit MdsDataset(std::string dir, bool verify_hashes = true, MdsCacheLimits limits = {});
  ~MdsDataset();

  uint64_t size() const { return total_; }
  const std::vector<MdsShardInfo>& shards() const { return shards_; }
  // The shard entry that holds sample i (its column names and encodings).
  const MdsShardInfo& shard_of(uint64_t i) const;

  // Token ids of sample i, column "tokens" unless named (see decode_mds_tokens for `bytes_dtype`).
  std::vector<int32_t> tokens(uint64_t i, std::string_view bytes_dtype = kDefaultBytesTokenType,
                              std::string_view column = "tokens") const;
  std::string str(uint64_t i, std::string_view column) const;      // a "str" column, or "json" as its text
  int64_t integer(uint64_t i, std::string_view column) const;      // an "int" column

 private:
  struct Open;
  struct Cache;
  struct Value {
    std::shared_ptr<const Open> shard;  // keeps `bytes` alive while the cache may close the shard
    std::span<const std::byte> bytes;
    const std::string* encoding;
    std::string where;  // "SHARD: sample K, column NAME" for errors
  };
  Value value(uint64_t i, std::string_view column) const;
  std::shared_ptr<const Open> open(size_t shard) const;
  std::unique_ptr<Open> load(size_t shard, bool verify_hashes) const;

  std::string dir_;
  bool verify_hashes_;
  std::vector<MdsShardInfo> shards_;
  std::vector<uint64_t> starts_;  // first sample of each shard
  uint64_t total_ = 0;
  std::unique_ptr<Cache> cache_;
};

}  // namespace hone::data
