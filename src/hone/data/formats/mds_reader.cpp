#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "hone/core/allocator.hpp"
#include "hone/core/error.hpp"
#include "hone/core/json_text.hpp"
#include "hone/data/formats/mapped_file.hpp"
#include "hone/data/formats/mds.hpp"

namespace hone::data {

namespace {

using nlohmann::json;

// NDArray's dtype codes (streaming/base/format/mds/encodings.py): bits of the
// element size, +1 for signed integers, +2 for floats.
struct ValueDType {
  uint8_t code;
  const char* name;
  size_t size;
  bool is_integer, is_signed;
};
constexpr ValueDType kValueDTypes[] = {
    {8, "uint8", 1, true, false},    {9, "int8", 1, true, true},       {16, "uint16", 2, true, false},
    {17, "int16", 2, true, true},    {18, "float16", 2, false, true},  {32, "uint32", 4, true, false},
    {33, "int32", 4, true, true},    {34, "float32", 4, false, true},  {64, "uint64", 8, true, false},
    {65, "int64", 8, true, true},    {66, "float64", 8, false, true},
};

const ValueDType* dtype_by_name(std::string_view name) {
  for (const auto& d : kValueDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

const ValueDType* dtype_by_code(uint8_t code) {
  for (const auto& d : kValueDTypes)
    if (code == d.code) return &d;
  return nullptr;
}

// "ndarray[:DTYPE[:D0,D1,...]]" split into its static parts.
struct NDArraySpec {
  const ValueDType* dtype = nullptr;  // none: stored per value
  std::optional<std::vector<uint64_t>> shape;
};

std::optional<NDArraySpec> parse_ndarray(std::string_view encoding) {
  if (encoding == "ndarray") return NDArraySpec{};
  if (!encoding.starts_with("ndarray:")) return std::nullopt;
  std::string_view rest = encoding.substr(8);
  NDArraySpec spec;
  const size_t colon = rest.find(':');
  spec.dtype = dtype_by_name(rest.substr(0, colon));
  if (!spec.dtype) return std::nullopt;
  if (colon == std::string_view::npos) return spec;
  std::vector<uint64_t> shape;
  std::string_view dims = rest.substr(colon + 1);
  while (true) {
    const size_t comma = dims.find(',');
    std::string_view dim = dims.substr(0, comma);
    uint64_t value = 0;
    if (dim.empty() || dim.size() > 12) return std::nullopt;
    for (char c : dim) {
      if (c < '0' || c > '9') return std::nullopt;
      value = value * 10 + uint64_t(c - '0');
    }
    if (value == 0) return std::nullopt;
    shape.push_back(value);
    if (comma == std::string_view::npos) break;
    dims = dims.substr(comma + 1);
  }
  spec.shape = std::move(shape);
  return spec;
}

// The fixed encoded size of a column, when hone knows the encoding: nullopt inside
// means variable size; an empty outer optional means an encoding hone cannot judge.
std::optional<std::optional<uint64_t>> known_size(std::string_view encoding) {
  if (encoding == "str" || encoding == "bytes" || encoding == "json" || encoding == "pkl" || encoding == "str_int" ||
      encoding == "str_float" || encoding == "str_decimal")
    return std::optional<uint64_t>();
  if (encoding == "int") return std::optional<uint64_t>(8);
  if (const ValueDType* scalar = dtype_by_name(encoding)) return std::optional<uint64_t>(scalar->size);
  if (auto spec = parse_ndarray(encoding)) {
    if (!spec->dtype || !spec->shape) return std::optional<uint64_t>();
    // Beyond 2^32 no shard can hold the value; saturate rather than overflow.
    uint64_t n = spec->dtype->size;
    for (uint64_t d : *spec->shape) n = d >= (uint64_t(1) << 32) || n >= (uint64_t(1) << 32) ? UINT64_MAX : n * d;
    return std::optional<uint64_t>(n);
  }
  return std::nullopt;
}

const json& field(const json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  HONE_CHECK(it != object.end(), "{}: no key '{}'", where, key);
  return *it;
}

uint64_t unsigned_field(const json& object, const char* key, const std::string& where) {
  const json& value = field(object, key, where);
  HONE_CHECK(value.is_number_unsigned(), "{}: '{}' is {}, expected a non-negative integer", where, key,
             value.type_name());
  return value.get<uint64_t>();
}

std::vector<std::string> string_list(const json& object, const char* key, const std::string& where) {
  const json& value = field(object, key, where);
  HONE_CHECK(value.is_array(), "{}: '{}' is {}, expected a list of strings", where, key, value.type_name());
  std::vector<std::string> out;
  for (const json& item : value) {
    HONE_CHECK(item.is_string(), "{}: '{}' holds {}, expected strings", where, key, item.type_name());
    out.push_back(item.get<std::string>());
  }
  return out;
}

MdsFileInfo file_info(const json& value, const std::string& where) {
  HONE_CHECK(value.is_object(), "{}: expected {{basename, bytes, hashes}}, found {}", where, value.type_name());
  MdsFileInfo info;
  const json& basename = field(value, "basename", where);
  HONE_CHECK(basename.is_string(), "{}: 'basename' is {}, expected a string", where, basename.type_name());
  info.basename = basename.get<std::string>();
  // A basename is a file in the dataset folder, never a path out of it.
  HONE_CHECK(!info.basename.empty() && info.basename != "." && info.basename != ".." &&
                 info.basename.find('/') == std::string::npos && info.basename.find('\0') == std::string::npos,
             "{}: basename '{}' is not a plain file name", where, info.basename);
  info.bytes = unsigned_field(value, "bytes", where);
  const json& hashes = field(value, "hashes", where);
  HONE_CHECK(hashes.is_object(), "{}: 'hashes' is {}, expected an object", where, hashes.type_name());
  for (auto& [algorithm, digest] : hashes.items()) {
    HONE_CHECK(digest.is_string(), "{}: hash '{}' is {}, expected a hex string", where, algorithm, digest.type_name());
    info.hashes[algorithm] = digest.get<std::string>();
  }
  return info;
}

bool is_zstd(std::string_view compression) {
  if (compression == "zstd") return true;
  if (!compression.starts_with("zstd:")) return false;
  const std::string level(compression.substr(5));
  for (int l = 1; l <= 22; ++l)
    if (level == std::to_string(l)) return true;
  return false;
}

MdsShardInfo shard_info(const json& entry, const std::string& where) {
  HONE_CHECK(entry.is_object(), "{}: expected an object, found {}", where, entry.type_name());
  const json& format = field(entry, "format", where);
  HONE_CHECK(format == "mds", "{}: format {}, expected \"mds\" (hone reads MDS shards only)", where, format.dump());
  const json& version = field(entry, "version", where);
  HONE_CHECK(version == 2, "{}: version {}, expected 2", where, version.dump());
  MdsShardInfo info;
  info.column_names = string_list(entry, "column_names", where);
  info.column_encodings = string_list(entry, "column_encodings", where);
  const json& sizes = field(entry, "column_sizes", where);
  HONE_CHECK(sizes.is_array(), "{}: 'column_sizes' is {}, expected a list", where, sizes.type_name());
  for (const json& size : sizes) {
    HONE_CHECK(size.is_null() || size.is_number_unsigned(),
               "{}: 'column_sizes' holds {}, expected non-negative integers or null", where, size.type_name());
    info.column_sizes.push_back(size.is_null() ? std::nullopt : std::optional<uint64_t>(size.get<uint64_t>()));
  }
  const size_t columns = info.column_names.size();
  HONE_CHECK(columns > 0 && info.column_encodings.size() == columns && info.column_sizes.size() == columns,
             "{}: {} column names, {} encodings and {} sizes, expected the same positive number of each", where,
             columns, info.column_encodings.size(), info.column_sizes.size());
  for (size_t c = 0; c < columns; ++c) {
    for (size_t k = 0; k < c; ++k)
      HONE_CHECK(info.column_names[k] != info.column_names[c], "{}: column '{}' appears twice", where,
                 info.column_names[c]);
    const auto expected = known_size(info.column_encodings[c]);
    HONE_CHECK(!expected || *expected == info.column_sizes[c],
               "{}: column '{}' ({}) has size {}, but that encoding has {}", where, info.column_names[c],
               info.column_encodings[c], info.column_sizes[c] ? std::to_string(*info.column_sizes[c]) : "null",
               expected && *expected ? std::to_string(**expected) : "a variable size (null)");
    HONE_CHECK(!info.column_sizes[c] || *info.column_sizes[c] < (uint64_t(1) << 32),
               "{}: column '{}' has size {}, beyond what a shard's 32-bit offsets address", where,
               info.column_names[c], *info.column_sizes[c]);
  }
  const json& compression = field(entry, "compression", where);
  HONE_CHECK(compression.is_null() || compression.is_string(), "{}: 'compression' is {}, expected a string or null",
             where, compression.type_name());
  if (compression.is_string()) info.compression = compression.get<std::string>();
  info.hashes = string_list(entry, "hashes", where);
  info.samples = unsigned_field(entry, "samples", where);
  info.raw_data = file_info(field(entry, "raw_data", where), where + ".raw_data");
  // Offsets are u32, so no valid shard is 4 GiB or more; checking here also bounds
  // what a decompression may allocate.
  HONE_CHECK(info.raw_data.bytes < (uint64_t(1) << 32), "{}: raw_data.bytes {} is beyond what 32-bit offsets address",
             where, info.raw_data.bytes);
  // A shard starts with its sample count and one 4-byte offset per sample, and one more.
  HONE_CHECK(info.samples <= (info.raw_data.bytes - std::min<uint64_t>(info.raw_data.bytes, 8)) / 4,
             "{}: samples {} do not fit raw_data.bytes {} (each takes a 4-byte offset)", where, info.samples,
             info.raw_data.bytes);
  const json& zip = field(entry, "zip_data", where);
  if (!zip.is_null()) info.zip_data = file_info(zip, where + ".zip_data");
  HONE_CHECK(info.zip_data.has_value() == !info.compression.empty(),
             "{}: compression is {} but zip_data is {}", where, compression.dump(), zip.is_null() ? "null" : "set");
  return info;
}

}  // namespace

MdsShardInfo parse_mds_shard_info(std::string_view json_text, const std::string& where) {
  return shard_info(parse_json_text<json>(json_text, where), where);
}

std::vector<MdsShardInfo> parse_mds_index(std::string_view text, const std::string& path) {
  const json index = parse_json_text<json>(text, path);  // a cut-short file names where it ends
  HONE_CHECK(index.is_object(), "{}: not a JSON object (a streaming index.json)", path);
  const json& version = field(index, "version", path);
  HONE_CHECK(version == 2, "{}: version {}, expected 2", path, version.dump());
  const json& shards = field(index, "shards", path);
  HONE_CHECK(shards.is_array(), "{}: 'shards' is {}, expected a list", path, shards.type_name());
  std::vector<MdsShardInfo> out;
  for (size_t s = 0; s < shards.size(); ++s) out.push_back(shard_info(shards[s], fmt::format("{}: shards[{}]", path, s)));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Shards

MdsShard::MdsShard(std::span<const std::byte> data, const MdsShardInfo& info, std::string name)
    : data_(data), info_(&info), name_(std::move(name)) {
  HONE_CHECK(data.size() >= 4, "{}: {} bytes is too short for an MDS shard (it starts with a 4-byte sample count)",
             name_, data.size());
  count_ = load_le<uint32_t>(data.data());
  HONE_CHECK(count_ == info.samples, "{}: holds {} samples (byte 0), index.json says {}", name_, count_,
             info.samples);
  const uint64_t table_end = 4 + (uint64_t(count_) + 1) * 4;
  HONE_CHECK(table_end <= data.size(), "{}: the offsets of {} samples end at byte {}, past the {}-byte file (truncated?)",
             name_, count_, table_end, data.size());
  const uint32_t first = load_le<uint32_t>(data.data() + 4);
  HONE_CHECK(first >= table_end && first <= data.size(),
             "{}: sample 0 starts at byte {} (offset at byte 4), expected {}..{} (after the offsets, in the file)",
             name_, first, table_end, data.size());
  uint32_t previous = first;
  for (uint32_t i = 1; i <= count_; ++i) {
    const uint32_t offset = load_le<uint32_t>(data.data() + 4 + uint64_t(i) * 4);
    HONE_CHECK(offset >= previous && offset <= data.size(),
               "{}: sample {} ends at byte {} (offset at byte {}), expected {}..{} (the file has {} bytes; truncated?)",
               name_, i - 1, offset, 4 + uint64_t(i) * 4, previous, data.size(), data.size());
    previous = offset;
  }
  HONE_CHECK(previous == data.size(), "{}: the last sample ends at byte {}, but the file has {} bytes", name_, previous,
             data.size());
  // The config between the offsets and the samples must describe the columns index.json names.
  const auto* config_begin = reinterpret_cast<const char*>(data.data() + table_end);
  json config = json::parse(config_begin, config_begin + (first - table_end), nullptr, false);
  HONE_CHECK(!config.is_discarded() && config.is_object(), "{}: bytes {}..{} are not the shard's JSON config", name_,
             table_end, first);
  json sizes = json::array();
  for (const std::optional<uint64_t>& size : info.column_sizes) sizes.push_back(size ? json(*size) : json());
  for (const auto& [key, expected] : {std::pair<const char*, json>{"column_names", info.column_names},
                                      {"column_encodings", info.column_encodings}, {"column_sizes", sizes}}) {
    auto it = config.find(key);
    HONE_CHECK(it == config.end() || *it == expected, "{}: the shard's config has {} {}, index.json has {}", name_,
               key, it == config.end() ? "" : it->dump(), expected.dump());
  }
}

std::span<const std::byte> MdsShard::column(uint32_t i, size_t c) const {
  HONE_CHECK(i < count_, "{}: sample {} out of range (the shard has {})", name_, i, count_);
  HONE_ASSERT(c < info_->column_names.size());
  const uint64_t begin = load_le<uint32_t>(data_.data() + 4 + uint64_t(i) * 4);
  const uint64_t end = load_le<uint32_t>(data_.data() + 8 + uint64_t(i) * 4);
  // The sample starts with the u32 sizes of its variable-size columns.
  uint64_t pos = begin, value_begin = 0, value_size = 0, total = 0;
  std::vector<uint64_t> sizes;
  for (const auto& fixed : info_->column_sizes) {
    if (fixed) {
      sizes.push_back(*fixed);
      continue;
    }
    HONE_CHECK(pos + 4 <= end, "{}: sample {} (bytes {}..{}) is too short for its column sizes", name_, i, begin, end);
    sizes.push_back(load_le<uint32_t>(data_.data() + pos));
    pos += 4;
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (k == c) value_begin = pos + total, value_size = sizes[k];
    total += sizes[k];
  }
  HONE_CHECK(total == end - pos, "{}: sample {} (bytes {}..{}) has {} bytes of values, its column sizes add up to {}",
             name_, i, begin, end, end - pos, total);
  return data_.subspan(value_begin, value_size);
}

namespace {

// `count` little-endian integers of `dtype` from `p` as token ids.
void decode_integers(const std::byte* p, uint64_t count, const ValueDType& dtype, std::vector<int32_t>& out,
                     const std::string& where, std::string_view hint) {
  out.resize(count);
  for (uint64_t k = 0; k < count; ++k, p += dtype.size) {
    int64_t v;
    bool ok = true;
    switch (dtype.size) {
      case 1: v = dtype.is_signed ? int64_t(load_le<int8_t>(p)) : int64_t(load_le<uint8_t>(p)); break;
      case 2: v = dtype.is_signed ? int64_t(load_le<int16_t>(p)) : int64_t(load_le<uint16_t>(p)); break;
      case 4: v = dtype.is_signed ? int64_t(load_le<int32_t>(p)) : int64_t(load_le<uint32_t>(p)); break;
      default: {
        v = load_le<int64_t>(p);
        ok = dtype.is_signed || v >= 0;
      }
    }
    HONE_CHECK(ok && v >= 0 && v <= std::numeric_limits<int32_t>::max(), "{}: element {} is {}, not a token id{}",
               where, k, dtype.is_signed ? fmt::format("{}", v) : fmt::format("{}", uint64_t(v)), hint);
    out[k] = int32_t(v);
  }
}

}  // namespace

void decode_mds_tokens(std::span<const std::byte> value, std::string_view encoding, std::vector<int32_t>& out,
                       const std::string& where, std::string_view bytes_dtype) {
  if (encoding == "bytes") {
    const ValueDType* dtype = dtype_by_name(bytes_dtype);
    HONE_CHECK(dtype && dtype->is_integer, "{}: '{}' is not an integer dtype to read 'bytes' tokens as", where,
               bytes_dtype);
    const std::string hint =
        fmt::format(" (raw 'bytes' tokens read as {}: set dataset.token_encoding_type to the dtype they were written "
                    "as)",
                    dtype->name);
    HONE_CHECK(value.size() % dtype->size == 0, "{}: {} bytes are not a whole number of token ids{}", where,
               value.size(), hint);
    decode_integers(value.data(), value.size() / dtype->size, *dtype, out, where, hint);
    return;
  }
  const auto spec = parse_ndarray(encoding);
  HONE_CHECK(spec.has_value(), "{}: encoding '{}' is not an ndarray of token ids (nor 'bytes')", where, encoding);
  size_t pos = 0;
  const ValueDType* dtype = spec->dtype;
  if (!dtype) {
    HONE_CHECK(pos < value.size(), "{}: empty value, expected an ndarray dtype byte", where);
    dtype = dtype_by_code(uint8_t(value[pos]));
    HONE_CHECK(dtype, "{}: ndarray dtype code {} (byte 0 of the value) is unknown", where, unsigned(value[pos]));
    ++pos;
  }
  HONE_CHECK(dtype->is_integer, "{}: ndarray of {}, expected integer token ids", where, dtype->name);
  uint64_t numel = 1;
  if (spec->shape) {
    for (uint64_t d : *spec->shape) {
      HONE_CHECK(numel * d <= value.size(), "{}: encoding '{}' declares more elements than the {}-byte value holds",
                 where, encoding, value.size());
      numel *= d;
    }
  } else {
    HONE_CHECK(pos < value.size(), "{}: the value ends before the ndarray shape byte", where);
    const unsigned byte = unsigned(value[pos++]);
    const uint64_t ndim = byte >> 2, dim_size = uint64_t(1) << (byte & 3);
    HONE_CHECK(ndim >= 1 && pos + ndim * dim_size <= value.size(),
               "{}: ndarray shape byte {:#04x} declares {} dimensions of {} bytes; the value has {} bytes", where, byte,
               ndim, dim_size, value.size());
    for (uint64_t k = 0; k < ndim; ++k, pos += dim_size) {
      uint64_t d = 0;
      std::memcpy(&d, value.data() + pos, dim_size);
      HONE_CHECK(d <= value.size() && numel * d <= value.size(),
                 "{}: ndarray dimension {} is {}; the value has only {} bytes", where, k, d, value.size());
      numel *= d;
    }
  }
  HONE_CHECK(value.size() - pos == numel * dtype->size,
             "{}: {} elements of {} need {} bytes after the {}-byte ndarray header, the value has {}", where, numel,
             dtype->name, numel * dtype->size, pos, value.size() - pos);
  decode_integers(value.data() + pos, numel, *dtype, out, where, "");
}

std::optional<std::string> mds_hash(std::string_view algorithm, std::span<const std::byte> data) {
  if (algorithm == "xxh32") return fmt::format("{:08x}", XXH32(data.data(), data.size(), 0));
  if (algorithm == "xxh64") return fmt::format("{:016x}", XXH64(data.data(), data.size(), 0));
  if (algorithm == "xxh3_64") return fmt::format("{:016x}", XXH3_64bits(data.data(), data.size()));
  if (algorithm == "xxh128") {
    const XXH128_hash_t h = XXH3_128bits(data.data(), data.size());
    return fmt::format("{:016x}{:016x}", h.high64, h.low64);  // python-xxhash's canonical order
  }
  return std::nullopt;
}

std::vector<std::byte> zstd_decompress_exact(std::span<const std::byte> data, uint64_t size, const std::string& name) {
  const unsigned long long declared = ZSTD_getFrameContentSize(data.data(), data.size());
  HONE_CHECK(declared != ZSTD_CONTENTSIZE_ERROR, "{}: not zstd data (bad frame header at byte 0)", name);
  HONE_CHECK(declared == ZSTD_CONTENTSIZE_UNKNOWN || declared == size,
             "{}: the zstd frame holds {} bytes, index.json says {}", name, declared, size);
  std::vector<std::byte> out(size);
  const size_t got = ZSTD_decompress(out.data(), out.size(), data.data(), data.size());
  HONE_CHECK(!ZSTD_isError(got), "{}: corrupt zstd data: {} (expected {} bytes once decompressed)", name,
             ZSTD_getErrorName(got), size);
  HONE_CHECK(got == size, "{}: decompresses to {} bytes, index.json says {}", name, got, size);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Dataset

struct MdsDataset::Open {
  std::unique_ptr<MappedFile> file;  // the raw shard, or the compressed one while decompressing
  std::vector<std::byte> inflated;
  std::optional<MdsShard> shard;
};

// The open shards, least recently used last, within the limits.
struct MdsDataset::Cache {
  struct Entry {
    std::shared_ptr<const Open> open;
    std::list<size_t>::iterator position;  // in `recent`
  };
  Cache(size_t shards, MdsCacheLimits limits) : limits(limits), opened_before(shards) {}
  const MdsCacheLimits limits;
  std::mutex mutex;
  std::list<size_t> recent;  // most recently used first
  std::unordered_map<size_t, Entry> open;
  uint64_t decompressed_bytes = 0;  // held by the open shards
  std::vector<bool> opened_before;  // hashes are checked the first time only
  bool told_of_decompressing_again = false;
};

MdsDataset::MdsDataset(std::string dir, bool verify_hashes, MdsCacheLimits limits)
    : dir_(std::move(dir)), verify_hashes_(verify_hashes) {
  const std::string index_path = (std::filesystem::path(dir_) / "index.json").string();
  MappedFile index(index_path);
  shards_ = parse_mds_index(
      std::string_view(reinterpret_cast<const char*>(index.bytes().data()), index.bytes().size()), index_path);
  for (const MdsShardInfo& shard : shards_) {
    starts_.push_back(total_);
    total_ += shard.samples;
  }
  HONE_CHECK(limits.open_shards > 0, "MdsCacheLimits: open_shards must be positive");
  if (limits.decompressed_bytes == 0) {
    const uint64_t memory = host_memory_bytes();
    limits.decompressed_bytes = memory > 0 ? memory / 4 : uint64_t(8) << 30;
  }
  cache_ = std::make_unique<Cache>(shards_.size(), limits);
}

MdsDataset::~MdsDataset() = default;

namespace {

void verify(const MdsFileInfo& info, std::span<const std::byte> data, const std::string& path, bool hashes) {
  HONE_CHECK(data.size() == info.bytes, "{}: {} bytes, index.json says {} (truncated or replaced?)", path, data.size(),
             info.bytes);
  if (!hashes) return;
  for (const auto& [algorithm, expected] : info.hashes) {
    const auto actual = mds_hash(algorithm, data);
    HONE_CHECK(!actual || *actual == expected, "{}: {} is {}, index.json says {} (corrupted?)", path, algorithm,
               *actual, expected);
  }
}

}  // namespace

std::unique_ptr<MdsDataset::Open> MdsDataset::load(size_t s, bool verify_hashes) const {
  const MdsShardInfo& info = shards_[s];
  auto open = std::make_unique<Open>();
  const auto path = [&](const std::string& basename) { return (std::filesystem::path(dir_) / basename).string(); };
  const std::string raw_path = path(info.raw_data.basename);
  std::span<const std::byte> raw;
  // streaming leaves the decompressed shard next to the compressed one; prefer it.
  std::error_code ec;
  if (!info.zip_data || std::filesystem::exists(raw_path, ec)) {
    open->file = std::make_unique<MappedFile>(raw_path);
    raw = open->file->bytes();
  } else {
    const std::string zip_path = path(info.zip_data->basename);
    HONE_CHECK(is_zstd(info.compression), "{}: compression '{}' is not supported (hone reads zstd)", zip_path,
               info.compression);
    MappedFile zip(zip_path);
    verify(*info.zip_data, zip.bytes(), zip_path, verify_hashes);
    open->inflated = zstd_decompress_exact(zip.bytes(), info.raw_data.bytes, zip_path);
    raw = open->inflated;
  }
  verify(info.raw_data, raw, raw_path, verify_hashes);
  open->shard.emplace(raw, info, raw_path);
  return open;
}

std::shared_ptr<const MdsDataset::Open> MdsDataset::open(size_t s) const {
  Cache& cache = *cache_;
  bool verify_hashes = false;
  {
    std::lock_guard lock(cache.mutex);
    if (const auto it = cache.open.find(s); it != cache.open.end()) {
      cache.recent.splice(cache.recent.begin(), cache.recent, it->second.position);
      return it->second.open;
    }
    verify_hashes = verify_hashes_ && !cache.opened_before[s];
  }
  // Opened unlocked, so that other threads read other shards meanwhile.
  std::shared_ptr<const Open> loaded = load(s, verify_hashes);
  std::lock_guard lock(cache.mutex);
  if (const auto it = cache.open.find(s); it != cache.open.end()) return it->second.open;  // opened meanwhile
  // Opened before and not open now: the limits closed it.
  const bool reopened = cache.opened_before[s];
  cache.opened_before[s] = true;
  if (reopened && !loaded->inflated.empty() && !cache.told_of_decompressing_again) {
    cache.told_of_decompressing_again = true;
    fmt::print(stderr,
               "hone: note: {}: its decompressed shards take more than the {:.3g} GB of memory kept for them, so "
               "shards are decompressed again as samples need them (slow); decompress them once in place (zstd -d "
               "*.mds.zstd in that folder: hone reads the .mds next to each .mds.zstd)\n",
               dir_, double(cache.limits.decompressed_bytes) / 1e9);
  }
  cache.recent.push_front(s);
  cache.open.emplace(s, Cache::Entry{loaded, cache.recent.begin()});
  cache.decompressed_bytes += loaded->inflated.size();
  while (cache.recent.size() > 1 && (cache.recent.size() > cache.limits.open_shards ||
                                     cache.decompressed_bytes > cache.limits.decompressed_bytes)) {
    const auto victim = cache.open.find(cache.recent.back());
    cache.decompressed_bytes -= victim->second.open->inflated.size();
    cache.open.erase(victim);
    cache.recent.pop_back();
  }
  return loaded;
}

const MdsShardInfo& MdsDataset::shard_of(uint64_t i) const {
  HONE_CHECK(i < total_, "{}: sample {} out of range (the dataset has {})", dir_, i, total_);
  return shards_[size_t(std::upper_bound(starts_.begin(), starts_.end(), i) - starts_.begin()) - 1];
}

MdsDataset::Value MdsDataset::value(uint64_t i, std::string_view column) const {
  const MdsShardInfo& info = shard_of(i);
  const size_t s = size_t(&info - shards_.data());
  const auto it = std::find(info.column_names.begin(), info.column_names.end(), column);
  HONE_CHECK(it != info.column_names.end(), "{}: shard {} has no column '{}'", dir_, info.raw_data.basename, column);
  const size_t c = size_t(it - info.column_names.begin());
  const uint32_t k = uint32_t(i - starts_[s]);
  std::shared_ptr<const Open> shard = open(s);
  const std::span<const std::byte> bytes = shard->shard->column(k, c);
  return {std::move(shard), bytes, &info.column_encodings[c],
          fmt::format("{}/{}: sample {}, column '{}'", dir_, info.raw_data.basename, k, column)};
}

std::vector<int32_t> MdsDataset::tokens(uint64_t i, std::string_view bytes_dtype, std::string_view column) const {
  const Value v = value(i, column);
  std::vector<int32_t> out;
  decode_mds_tokens(v.bytes, *v.encoding, out, v.where, bytes_dtype);
  return out;
}

std::string MdsDataset::str(uint64_t i, std::string_view column) const {
  const Value v = value(i, column);
  HONE_CHECK(*v.encoding == "str" || *v.encoding == "json", "{}: encoding '{}', expected 'str'", v.where,
             *v.encoding);
  return std::string(reinterpret_cast<const char*>(v.bytes.data()), v.bytes.size());
}

int64_t MdsDataset::integer(uint64_t i, std::string_view column) const {
  const Value v = value(i, column);
  HONE_CHECK(*v.encoding == "int", "{}: encoding '{}', expected 'int'", v.where, *v.encoding);
  return load_le<int64_t>(v.bytes.data());
}

}  // namespace hone::data
