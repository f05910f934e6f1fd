#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "hone/core/error.hpp"
#include "hone/data/formats/mds.hpp"
#include "hone/io/atomic_file.hpp"

namespace hone::data {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Python's json.dumps(obj, sort_keys=True): ", " and ": " separators, non-ASCII as
// \uXXXX. streaming writes index.json and each shard's config this way, so hone's
// files match its byte for byte. (nlohmann's objects already sort their keys.)
void dump_python(const json& value, std::string& out) {
  switch (value.type()) {
    case json::value_t::null: out += "null"; return;
    case json::value_t::boolean: out += value.get<bool>() ? "true" : "false"; return;
    case json::value_t::number_integer: out += std::to_string(value.get<int64_t>()); return;
    case json::value_t::number_unsigned: out += std::to_string(value.get<uint64_t>()); return;
    case json::value_t::array: {
      out += '[';
      for (size_t i = 0; i < value.size(); ++i) {
        if (i) out += ", ";
        dump_python(value[i], out);
      }
      out += ']';
      return;
    }
    case json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (!first) out += ", ";
        first = false;
        dump_python(json(key), out);
        out += ": ";
        dump_python(item, out);
      }
      out += '}';
      return;
    }
    case json::value_t::string: {
      const std::string& s = value.get_ref<const std::string&>();
      out += '"';
      for (size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        uint32_t cp = c;
        size_t n = 1;
        if (c >= 0x80) {
          n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
          HONE_CHECK(c >= 0xc2 && c <= 0xf4 && i + n <= s.size(), "'{}' is not valid UTF-8", s);
          cp = c & (0x3f >> (n - 1));
          for (size_t k = 1; k < n; ++k) {
            const auto cc = static_cast<unsigned char>(s[i + k]);
            HONE_CHECK((cc & 0xc0) == 0x80, "'{}' is not valid UTF-8", s);
            cp = (cp << 6) | (cc & 0x3f);
          }
        }
        i += n;
        switch (cp) {
          case '"': out += "\\\""; break;
          case '\\': out += "\\\\"; break;
          case '\n': out += "\\n"; break;
          case '\r': out += "\\r"; break;
          case '\t': out += "\\t"; break;
          case '\b': out += "\\b"; break;
          case '\f': out += "\\f"; break;
          default:
            if (cp < 0x20 || (cp >= 0x7f && cp < 0x10000)) {  // everything outside ' '..'~'
              out += fmt::format("\\u{:04x}", cp);
            } else if (cp >= 0x10000) {  // a UTF-16 surrogate pair, as Python escapes it
              cp -= 0x10000;
              out += fmt::format("\\u{:04x}\\u{:04x}", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            } else {
              out += char(cp);
            }
        }
      }
      out += '"';
      return;
    }
    default: HONE_ASSERT(false);  // hone writes no floats or binary values
  }
}

std::string python_json(const json& value) {
  std::string out;
  dump_python(value, out);
  return out;
}

template <typename T>
void append(std::vector<std::byte>& out, T value) {
  const auto* p = reinterpret_cast<const std::byte*>(&value);
  out.insert(out.end(), p, p + sizeof value);
}

const char* const kHashes[] = {"xxh128", "xxh32", "xxh3_64", "xxh64"};

}  // namespace

MdsWriter::MdsWriter(std::string dir, MdsWriterOptions options) : options_(std::move(options)) {
  fs::path target = fs::path(dir).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();  // "out/" names "out"
  HONE_CHECK(!target.empty() && target.filename() != "." && target.filename() != "..",
             "{}: not a usable MDS output folder name", dir);
  dir_ = target.string();
  std::error_code ec;
  HONE_CHECK(!fs::exists(target, ec) || (fs::is_directory(target, ec) && fs::is_empty(target, ec)),
             "{}: already exists and is not an empty folder; MDS output goes to a new or empty folder", dir_);

  const std::string& compression = options_.compression;
  if (compression == "zstd") {
    zstd_level_ = 3;  // streaming's default for "zstd"
  } else if (!compression.empty()) {
    for (int level = 1; level <= 22; ++level)
      if (compression == fmt::format("zstd:{}", level)) zstd_level_ = level;
    HONE_CHECK(zstd_level_ > 0, "{}: compression '{}', expected zstd or zstd:LEVEL with LEVEL in 1..22", dir_,
               compression);
  }
  for (size_t i = 0; i < options_.hashes.size(); ++i) {
    const std::string& h = options_.hashes[i];
    HONE_CHECK(std::find(std::begin(kHashes), std::end(kHashes), h) != std::end(kHashes),
               "{}: hash '{}', expected one of xxh32, xxh64, xxh3_64, xxh128", dir_, h);
    HONE_CHECK(i == 0 || options_.hashes[i - 1] < h, "{}: hashes must be sorted and unique, as streaming requires",
               dir_);
  }
  const bool u16 = options_.tokens == MdsTokenDType::u16;
  HONE_CHECK(!u16 || options_.vocab_size <= 65536,
             "{}: a vocabulary of {} tokens does not fit ndarray:uint16 (ids 0..65535); use int32", dir_,
             options_.vocab_size);
  HONE_CHECK(options_.vocab_size <= uint64_t(std::numeric_limits<int32_t>::max()) + 1,
             "{}: a vocabulary of {} tokens does not fit int32", dir_, options_.vocab_size);

  // streaming sorts columns by name; samples store them in that order.
  std::vector<std::pair<std::string, int>> columns{{"tokens", -1}};
  for (size_t i = 0; i < options_.extra_columns.size(); ++i) {
    const MdsColumn& column = options_.extra_columns[i];
    HONE_CHECK(column.encoding == "str" || column.encoding == "int",
               "{}: column '{}' has encoding '{}'; hone writes extra columns as str or int", dir_, column.name,
               column.encoding);
    HONE_CHECK(!column.name.empty(), "{}: an extra column has an empty name", dir_);
    for (const auto& [name, index] : columns)
      HONE_CHECK(name != column.name, "{}: column '{}' appears twice", dir_, column.name);
    columns.emplace_back(column.name, int(i));
  }
  std::sort(columns.begin(), columns.end());
  json sizes = json::array();
  for (const auto& [name, index] : columns) {
    names_.push_back(name);
    extra_of_column_.push_back(index);
    const std::string encoding =
        index < 0 ? (u16 ? "ndarray:uint16" : "ndarray:int32") : options_.extra_columns[size_t(index)].encoding;
    encodings_.push_back(encoding);
    sizes.push_back(encoding == "int" ? json(8) : json(nullptr));
  }
  json config = {{"column_encodings", encodings_},
                 {"column_names", names_},
                 {"column_sizes", sizes},
                 {"compression", compression.empty() ? json(nullptr) : json(compression)},
                 {"format", "mds"},
                 {"hashes", options_.hashes},
                 {"size_limit", options_.size_limit ? json(options_.size_limit) : json(nullptr)},
                 {"version", 2}};
  config_ = python_json(config);
  shard_estimate_ = 8 + config_.size();

  // Shards and index.json are written into a hidden sibling folder that is renamed
  // to DIR once complete; a crash leaves only ".DIR.tmp.PID".
  temp_dir_ = (target.parent_path() / fmt::format(".{}.tmp.{}", target.filename().string(), ::getpid())).string();
  remove_stale_temporaries(target.parent_path().empty() ? "." : target.parent_path(),
                           fmt::format(".{}.tmp.", target.filename().string()));
  fs::remove_all(temp_dir_, ec);
  fs::create_directories(temp_dir_, ec);
  HONE_CHECK(!ec, "{}: cannot create: {}", temp_dir_, ec.message());
}

MdsWriter::~MdsWriter() {
  if (!finished_) {
    std::error_code ec;
    fs::remove_all(temp_dir_, ec);
  }
}

void MdsWriter::add_document(std::span<const int32_t> tokens, std::span<const int32_t> sequence_lengths) {
  HONE_CHECK(sequence_lengths.empty() || (sequence_lengths.size() == 1 && size_t(sequence_lengths[0]) == tokens.size()),
             "{}: an MDS sample is a whole document; sentence splitting applies to Megatron output only", dir_);
  write(tokens, {});
}

void MdsWriter::write(std::span<const int32_t> tokens, std::span<const MdsValue> extras) {
  HONE_ASSERT(!finished_);
  HONE_CHECK(extras.size() == options_.extra_columns.size(), "{}: document {} has {} extra column values, expected {}",
             dir_, samples_ + skipped_empty_, extras.size(), options_.extra_columns.size());
  if (tokens.empty()) {
    ++skipped_empty_;
    return;
  }
  const bool u16 = options_.tokens == MdsTokenDType::u16;
  const int32_t max_id = u16 ? 65535 : std::numeric_limits<int32_t>::max();
  for (size_t i = 0; i < tokens.size(); ++i)
    HONE_CHECK(tokens[i] >= 0 && tokens[i] <= max_id,
               "{}: document {} has token id {} at position {}, outside {} (0..{})", dir_, samples_ + skipped_empty_,
               tokens[i], i, u16 ? "uint16" : "int32", max_id);

  // The sample: u32 sizes of the variable-size columns, then every column's value.
  sample_.clear();
  for (size_t c = 0; c < names_.size(); ++c) {
    const int extra = extra_of_column_[c];
    if (extra < 0) {
      // NDArray with a static dtype: one byte (ndim << 2 | log2 of the shape's
      // byte width), the shape, then the values.
      const uint64_t n = tokens.size();
      const unsigned width = n < (1u << 8) ? 0 : n < (1u << 16) ? 1 : 2;
      append(sample_, uint32_t(1 + (1u << width) + n * (u16 ? 2 : 4)));
    } else if (encodings_[c] == "str") {
      const auto* text = std::get_if<std::string>(&extras[size_t(extra)]);
      HONE_CHECK(text, "{}: column '{}' is str, sample {} gives an integer", dir_, names_[c], samples_);
      HONE_CHECK(text->size() < (uint64_t(1) << 31), "{}: column '{}' of sample {} is too long", dir_, names_[c],
                 samples_);
      append(sample_, uint32_t(text->size()));
    }
  }
  for (size_t c = 0; c < names_.size(); ++c) {
    const int extra = extra_of_column_[c];
    if (extra < 0) {
      const uint64_t n = tokens.size();
      const unsigned width = n < (1u << 8) ? 0 : n < (1u << 16) ? 1 : 2;
      sample_.push_back(std::byte((1u << 2) | width));
      if (width == 0) append(sample_, uint8_t(n));
      else if (width == 1) append(sample_, uint16_t(n));
      else append(sample_, uint32_t(n));
      const size_t at = sample_.size();
      sample_.resize(at + n * (u16 ? 2 : 4));
      if (u16) {
        for (size_t i = 0; i < n; ++i) {
          const auto t = uint16_t(tokens[i]);
          std::memcpy(sample_.data() + at + i * 2, &t, 2);
        }
      } else {
        std::memcpy(sample_.data() + at, tokens.data(), n * 4);
      }
    } else if (encodings_[c] == "str") {
      const auto& text = std::get<std::string>(extras[size_t(extra)]);
      const auto* p = reinterpret_cast<const std::byte*>(text.data());
      sample_.insert(sample_.end(), p, p + text.size());
    } else {
      const auto* value = std::get_if<int64_t>(&extras[size_t(extra)]);
      HONE_CHECK(value, "{}: column '{}' is int, sample {} gives a string", dir_, names_[c], samples_);
      append(sample_, *value);
    }
  }
  // streaming's rule: start a new shard when this sample (plus its 4-byte offset)
  // would take the shard past the limit.
  const uint64_t sample_cost = sample_.size() + 4;
  if (options_.size_limit && options_.size_limit < shard_estimate_ + sample_cost && !shard_sizes_.empty())
    flush_shard();
  HONE_CHECK(shard_estimate_ + sample_cost < (uint64_t(1) << 32),
             "{}: shard {} would reach 4 GiB, which MDS's 32-bit offsets cannot address; set a size limit", dir_,
             shards_);
  shard_samples_.insert(shard_samples_.end(), sample_.begin(), sample_.end());
  shard_sizes_.push_back(uint32_t(sample_.size()));
  shard_estimate_ += sample_cost;
  ++samples_;
}

void MdsWriter::flush_shard() {
  const uint32_t n = uint32_t(shard_sizes_.size());
  std::vector<std::byte> raw;
  raw.reserve(4 + 4 * (size_t(n) + 1) + config_.size() + shard_samples_.size());
  append(raw, n);
  uint32_t offset = uint32_t(4 + 4 * (size_t(n) + 1) + config_.size());
  append(raw, offset);
  for (uint32_t size : shard_sizes_) append(raw, offset += size);
  const auto* config = reinterpret_cast<const std::byte*>(config_.data());
  raw.insert(raw.end(), config, config + config_.size());
  raw.insert(raw.end(), shard_samples_.begin(), shard_samples_.end());

  const std::string raw_name = fmt::format("shard.{:05}.mds", shards_);
  auto info = [&](const std::string& basename, std::span<const std::byte> data) {
    json hashes = json::object();
    for (const std::string& h : options_.hashes) hashes[h] = *mds_hash(h, data);
    return json{{"basename", basename}, {"bytes", data.size()}, {"hashes", hashes}};
  };
  // An index entry is the shard's config plus where its files are.
  json entry = json::parse(config_);
  entry["raw_data"] = info(raw_name, raw);
  entry["samples"] = n;
  entry["zip_data"] = nullptr;
  std::string file_name = raw_name;
  std::vector<std::byte> zip;
  if (zstd_level_ > 0) {
    zip.resize(ZSTD_compressBound(raw.size()));
    // One-shot compression records the content size in the frame header.
    const size_t size = ZSTD_compress(zip.data(), zip.size(), raw.data(), raw.size(), zstd_level_);
    HONE_CHECK(!ZSTD_isError(size), "{}: zstd compression failed: {}", dir_, ZSTD_getErrorName(size));
    zip.resize(size);
    file_name = raw_name + ".zstd";
    entry["zip_data"] = info(file_name, zip);
  }
  const std::vector<std::byte>& data = zstd_level_ > 0 ? zip : raw;
  AtomicFile file((fs::path(temp_dir_) / file_name).string());
  file.write(data.data(), data.size());
  file.commit();

  if (shards_) shards_json_ += ", ";
  shards_json_ += python_json(entry);
  ++shards_;
  shard_samples_.clear();
  shard_sizes_.clear();
  shard_estimate_ = 8 + config_.size();
}

void MdsWriter::finish() {
  HONE_ASSERT(!finished_);
  if (!shard_sizes_.empty()) flush_shard();
  const std::string index = "{\"shards\": [" + shards_json_ + "], \"version\": 2}";
  AtomicFile file((fs::path(temp_dir_) / "index.json").string());
  file.write(index.data(), index.size());
  file.commit();
  // rename() replaces DIR only when it is missing or an empty folder.
  if (std::rename(temp_dir_.c_str(), dir_.c_str()) != 0)
    fail("{}: cannot move the finished dataset into place from {}: {}", dir_, temp_dir_, std::strerror(errno));
  finished_ = true;
  const fs::path parent = fs::path(dir_).parent_path();
  sync_directory(parent.empty() ? "." : parent.string());
}

}  // namespace hone::data
