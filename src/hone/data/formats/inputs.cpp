#include "hone/data/formats/inputs.hpp"

#include <glob.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "hone/core/error.hpp"
#include "hone/core/json_text.hpp"
#include "hone/core/text.hpp"
#include "hone/data/formats/mds.hpp"
#include "hone/data/formats/parquet.hpp"

namespace hone::data {

namespace {

constexpr size_t kChunk = size_t(1) << 17;

}  // namespace

// Pulls compressed bytes from the file and pushes decoded bytes out.
struct InputStream::Decoder {
  enum class Kind { plain, gzip, zstd } kind = Kind::plain;
  std::vector<unsigned char> in = std::vector<unsigned char>(kChunk);
  size_t in_pos = 0, in_end = 0;
  uint64_t consumed = 0;  // compressed bytes before in[0], for error offsets
  bool eof = false;
  bool in_frame = false;  // a gzip member or zstd frame is open
  z_stream z{};
  bool z_ready = false;
  ZSTD_DStream* zstd = nullptr;

  ~Decoder() {
    if (z_ready) inflateEnd(&z);
    if (zstd) ZSTD_freeDStream(zstd);
  }
};

InputStream::InputStream(const std::string& path, size_t max_record_bytes)
    : name_(path), max_record_bytes_(max_record_bytes), out_(kChunk) {
  file_ = std::fopen(path.c_str(), "rb");
  HONE_CHECK(file_, "{}: cannot open: {}", path, std::strerror(errno));
  owns_file_ = true;
  decoder_ = std::make_unique<Decoder>();
}

InputStream::InputStream(std::FILE* file, std::string name, size_t max_record_bytes)
    : name_(std::move(name)),
      max_record_bytes_(max_record_bytes),
      file_(file),
      decoder_(std::make_unique<Decoder>()),
      out_(kChunk) {}

void InputStream::check_record_size(size_t bytes, const char* what, const char* why) const {
  HONE_CHECK(bytes <= max_record_bytes_, "{}: {} longer than {} bytes (read to byte {} of the file): {}",
             name_, what, max_record_bytes_, bytes_read(), why);
}

InputStream::~InputStream() {
  if (owns_file_) std::fclose(file_);
}

uint64_t InputStream::bytes_read() const { return decoder_->consumed + decoder_->in_pos; }

bool InputStream::fill() {
  Decoder& d = *decoder_;
  auto refill = [&] {
    if (d.in_pos < d.in_end || d.eof) return d.in_pos < d.in_end;
    d.consumed += d.in_end;
    d.in_pos = 0;
    d.in_end = std::fread(d.in.data(), 1, d.in.size(), file_);
    HONE_CHECK(!std::ferror(file_), "{}: read failed at byte {}: {}", name_, d.consumed, std::strerror(errno));
    if (d.in_end == 0) d.eof = true;
    return d.in_end > 0;
  };
  auto starts_with = [&](std::initializer_list<unsigned char> magic) {
    return d.in_end - d.in_pos >= magic.size() && std::equal(magic.begin(), magic.end(), d.in.data() + d.in_pos);
  };
  while (true) {
    const bool input = refill();
    if (!input && !d.in_frame) return false;
    if (input && d.kind == Decoder::Kind::plain && d.consumed == 0 && d.in_pos == 0) {
      // The first read decides the format (fread fills the chunk unless the file is shorter).
      if (starts_with({0x1f, 0x8b})) {
        d.kind = Decoder::Kind::gzip;
        HONE_CHECK(inflateInit2(&d.z, 16 + MAX_WBITS) == Z_OK, "{}: cannot start gzip decoding", name_);
        d.z_ready = true;
      } else if (starts_with({0x28, 0xb5, 0x2f, 0xfd})) {
        d.kind = Decoder::Kind::zstd;
        d.zstd = ZSTD_createDStream();
        HONE_CHECK(d.zstd, "{}: cannot start zstd decoding", name_);
      }
    }
    // At the end of the file an open member or frame may still hold decoded bytes
    // (the last call filled out_); the decoders are called once more with no input.
    const size_t start = d.in_pos;
    switch (d.kind) {
      case Decoder::Kind::plain: {
        const size_t n = std::min(out_.size(), d.in_end - d.in_pos);
        std::memcpy(out_.data(), d.in.data() + d.in_pos, n);
        d.in_pos += n;
        out_pos_ = 0, out_end_ = n;
        return true;
      }
      case Decoder::Kind::gzip: {
        if (!d.in_frame) {
          // Whatever follows a member must be another member, not trailing garbage.
          HONE_CHECK(d.in_end - d.in_pos < 2 || starts_with({0x1f, 0x8b}),
                     "{}: byte {} is neither the end of the file nor a gzip member", name_, d.consumed + d.in_pos);
          HONE_CHECK(inflateReset(&d.z) == Z_OK, "{}: cannot restart gzip decoding", name_);
          d.in_frame = true;
        }
        d.z.next_in = d.in.data() + d.in_pos;
        d.z.avail_in = uInt(d.in_end - d.in_pos);
        d.z.next_out = reinterpret_cast<Bytef*>(out_.data());
        d.z.avail_out = uInt(out_.size());
        const int rc = inflate(&d.z, Z_NO_FLUSH);
        d.in_pos = d.in_end - d.z.avail_in;
        HONE_CHECK(rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR, "{}: corrupt gzip data near byte {}: {}",
                   name_, d.consumed + start, d.z.msg ? d.z.msg : zError(rc));
        if (rc == Z_STREAM_END) d.in_frame = false;
        out_pos_ = 0, out_end_ = out_.size() - d.z.avail_out;
        break;
      }
      case Decoder::Kind::zstd: {
        ZSTD_inBuffer in{d.in.data(), d.in_end, d.in_pos};
        ZSTD_outBuffer out{out_.data(), out_.size(), 0};
        const size_t rc = ZSTD_decompressStream(d.zstd, &out, &in);
        d.in_pos = in.pos;
        HONE_CHECK(!ZSTD_isError(rc), "{}: corrupt zstd data near byte {}: {}", name_, d.consumed + start,
                   ZSTD_getErrorName(rc));
        d.in_frame = rc != 0;  // 0: a frame ended and everything decoded was returned
        out_pos_ = 0, out_end_ = out.pos;
        break;
      }
    }
    if (out_end_ > 0) return true;
    HONE_CHECK(input, "{}: the {} data ends early at byte {} (truncated file?)", name_,
               d.kind == Decoder::Kind::gzip ? "gzip" : "zstd", d.consumed + d.in_end);
  }
}

bool InputStream::read_line(std::string& line) {
  line.clear();
  bool any = false;
  while (true) {
    if (out_pos_ == out_end_ && !fill()) break;
    any = true;
    const char* begin = out_.data() + out_pos_;
    const char* end = out_.data() + out_end_;
    const char* newline = static_cast<const char*>(std::memchr(begin, '\n', size_t(end - begin)));
    if (newline) {
      line.append(begin, newline);
      out_pos_ += size_t(newline - begin) + 1;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return true;
    }
    check_record_size(line.size() + size_t(end - begin), "a line",
                      "no line break: not JSON Lines, or one record too large to read");
    line.append(begin, end);
    out_pos_ = out_end_;
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return any;
}

std::string InputStream::read_all() {
  std::string text;
  while (out_pos_ < out_end_ || fill()) {
    check_record_size(text.size() + (out_end_ - out_pos_), "a text",
                      "too large for one document: split it, or give JSON Lines");
    text.append(out_.data() + out_pos_, out_end_ - out_pos_);
    out_pos_ = out_end_;
  }
  return text;
}

namespace {

// The line with what Python's json module reads beyond JSON (NaN, Infinity,
// -Infinity, and numbers too large for a double, which it reads as inf) written
// as null: Megatron reads lines json.dumps wrote with them. A key to tokenize is
// a string anyway.
std::string with_python_numbers_as_null(std::string_view line) {
  std::string out;
  bool in_string = false;
  for (size_t i = 0; i < line.size();) {
    const char c = line[i];
    if (in_string || c == '"') {
      out += line[i++];
      if (in_string && c == '\\' && i < line.size()) out += line[i++];
      else in_string = in_string ? c != '"' : true;
      continue;
    }
    if (c != '-' && c != 'N' && c != 'I' && !std::isdigit(static_cast<unsigned char>(c))) {
      out += line[i++];
      continue;
    }
    size_t end = i + 1;
    const auto in_number = [](char x) { return std::isalnum(static_cast<unsigned char>(x)) || x == '.' || x == '+' || x == '-'; };
    while (end < line.size() && in_number(line[end])) ++end;
    const std::string token(line.substr(i, end - i));
    out += std::isinf(std::strtod(token.c_str(), nullptr)) || token == "NaN" ? std::string("null") : token;
    i = end;
  }
  return out;
}

}  // namespace

void parse_jsonl_line(std::string_view line, std::span<const std::string> keys, std::string_view where,
                      std::vector<std::string>& values) {
  check_json_text(line, where);
  nlohmann::json object;
  try {
    object = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    object = nlohmann::json::parse(with_python_numbers_as_null(line), nullptr, /*allow_exceptions=*/false);
    if (object.is_discarded()) fail("{}: not valid JSON ({})", where, json_error_text(e));
  }
  HONE_CHECK(object.is_object(), "{}: expected a JSON object, found {}", where, object.type_name());
  values.clear();
  for (const std::string& key : keys) {
    auto it = object.find(key);
    if (it == object.end()) {
      std::string present;
      size_t listed = 0;
      for (auto& [name, value] : object.items()) {
        if (listed++ == 8) {
          present += ", ...";
          break;
        }
        present += (present.empty() ? "'" : ", '") + name + "'";
      }
      fail("{}: no key '{}' (the object has {})", where, key, present.empty() ? "no keys" : present);
    }
    HONE_CHECK(it->is_string(), "{}: key '{}' is {}, expected a string", where, key, it->type_name());
    values.push_back(it->get<std::string>());
  }
}

namespace {

std::string without_compression_suffix(std::string name) {
  for (const char* suffix : {".gz", ".zst", ".zstd"})
    if (name.ends_with(suffix)) name.resize(name.size() - std::strlen(suffix));
  return name;
}

// What a folder's walk takes: files of records or text, and names without an
// extension, read by their content.
bool is_data_name(const std::string& name) {
  return is_jsonl_name(name) || is_text_name(name) || is_parquet_name(name) ||
         without_compression_suffix(name).find('.') == std::string::npos;
}

// The first line of `path` (decompressed) that is not blank (nullopt: none).
std::optional<std::string> first_nonblank_line(const std::string& path) {
  InputStream in(path);
  std::string line;
  while (in.read_line(line)) {
    if (line.find_first_not_of(" \t\r\f\v") != std::string::npos) return line;
  }
  return std::nullopt;
}

// Whether that line is a JSON object (a record of JSON Lines).
bool first_line_is_json_object(const std::string& path) {
  const std::optional<std::string> line = first_nonblank_line(path);
  if (!line) return false;
  const nlohmann::json value = nlohmann::json::parse(*line, nullptr, /*allow_exceptions=*/false);
  return !value.is_discarded() && value.is_object();
}

// Whether that line's first character that is not white space opens a JSON object.
bool starts_like_jsonl(const std::string& path) {
  const std::optional<std::string> line = first_nonblank_line(path);
  return line && (*line)[line->find_first_not_of(" \t\r\f\v")] == '{';
}

}  // namespace

bool is_jsonl_name(std::string name) {
  name = without_compression_suffix(std::move(name));
  return name.ends_with(".jsonl") || name.ends_with(".json") || name.ends_with(".ndjson");
}

bool is_text_name(std::string name) {
  name = without_compression_suffix(std::move(name));
  return name.ends_with(".txt") || name.ends_with(".text");
}

std::vector<std::string> expand_patterns(const std::vector<std::string>& inputs) {
  std::vector<std::string> out;
  for (const std::string& input : inputs) {
    std::error_code ec;
    if (std::filesystem::exists(input, ec) || input.find_first_of("*?[") == std::string::npos) {
      out.push_back(input);
      continue;
    }
    glob_t found{};
    const int status = ::glob(input.c_str(), 0, nullptr, &found);
    std::vector<std::string> matches(found.gl_pathv, found.gl_pathv + (status == 0 ? found.gl_pathc : 0));
    ::globfree(&found);
    HONE_CHECK(!matches.empty(), "{}: no file or folder matches this pattern", input);
    out.insert(out.end(), matches.begin(), matches.end());
  }
  return out;
}

void check_each_file_once(const std::vector<std::pair<std::string, std::string>>& files_and_inputs) {
  std::map<std::string, std::pair<std::string, std::string>> seen;  // canonical path -> the first naming
  for (const auto& [file, input] : files_and_inputs) {
    std::error_code ec;
    const std::string canonical = std::filesystem::weakly_canonical(file, ec).string();
    const auto [first, added] = seen.emplace(ec ? file : canonical, std::pair(file, input));
    if (added) continue;
    const auto& [first_spelling, first_input] = first->second;
    const bool spelt_apart = first_spelling != file && first_spelling != first_input;  // a folder's ./a.txt
    fail("{}: named twice (by {}{}, and by {}): each file is read once", file, first_input,
         spelt_apart ? " as " + first_spelling : "", input);
  }
}

bool is_mds_folder(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_regular_file(fs::path(path) / "index.json", ec)) return false;
  for (auto it = fs::directory_iterator(path, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    if (it->path().filename().string().starts_with("shard.")) return true;
  return false;
}

namespace {

class MdsTextReader final : public RecordTextReader {
 public:
  MdsTextReader(const std::string& dir, std::vector<std::string> keys) : dir_(dir), keys_(std::move(keys)), dataset_(dir) {
    for (const MdsShardInfo& shard : dataset_.shards()) {
      for (const std::string& key : keys_) {
        const auto& names = shard.column_names;
        const auto column = std::find(names.begin(), names.end(), key);
        if (column != names.end() && shard.column_encodings[size_t(column - names.begin())] == "str") continue;
        std::string columns;
        for (size_t c = 0; c < names.size(); ++c)
          columns += fmt::format("{}{} ({})", c ? ", " : "", names[c], shard.column_encodings[c]);
        fail("{}: shard {} has no text column '{}' (its columns: {}); the keys (--json-keys) name str columns to "
             "tokenize{}",
             dir_, shard.raw_data.basename, key, columns,
             shard.has_column("tokens") ? "; its 'tokens' are token ids already" : "");
      }
    }
  }

  bool next(TextDocument& document) override {
    if (next_ == dataset_.size()) return false;
    document.origin = fmt::format("{}: sample {}", dir_, next_);
    document.fields.clear();
    for (const std::string& key : keys_) document.fields.push_back(dataset_.str(next_, key));
    ++next_;
    return true;
  }

 private:
  std::string dir_;
  std::vector<std::string> keys_;
  MdsDataset dataset_;
  uint64_t next_ = 0;
};

// A row group at a time: only the keys' columns are read.
class ParquetTextReader final : public RecordTextReader {
 public:
  ParquetTextReader(const std::string& path, std::vector<std::string> keys) : keys_(std::move(keys)), file_(path) {}

  bool next(TextDocument& document) override {
    while (next_ == rows_.size()) {
      if (group_ == file_.row_groups()) return false;
      rows_ = file_.read_rows(group_++, keys_);
      first_row_ += next_;
      next_ = 0;
    }
    const auto& row = rows_[next_];
    document.origin = fmt::format("{}: row {}", file_.path(), first_row_ + next_);
    document.fields.clear();
    for (const std::string& key : keys_) {
      auto it = row.find(key);
      HONE_CHECK(it != row.end() && it->is_string(), "{}: column '{}' is {}, expected a string", document.origin, key,
                 it == row.end() ? "null" : it->type_name());
      document.fields.push_back(it->get<std::string>());
    }
    ++next_;
    return true;
  }

 private:
  std::vector<std::string> keys_;
  ParquetFile file_;
  std::vector<nlohmann::ordered_json> rows_;
  size_t group_ = 0, next_ = 0;
  uint64_t first_row_ = 0;
};

}  // namespace

bool is_parquet_name(const std::string& path) { return path.ends_with(".parquet"); }

std::unique_ptr<RecordTextReader> open_record_text(const std::string& path, const std::vector<std::string>& keys) {
  if (is_parquet_name(path)) return std::make_unique<ParquetTextReader>(path, keys);
  return std::make_unique<MdsTextReader>(path, keys);
}

namespace {

// The files one input names: itself (a file, a pipe, an MDS folder), or a
// folder's data files sorted by path.
std::vector<std::string> files_of_input(const std::string& input) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (is_mds_folder(input)) return {input};
  if (!fs::is_directory(input, ec)) {
    // A file, or a pipe (/dev/stdin, <(zstdcat ...)), read once from start to end.
    HONE_CHECK(fs::exists(input, ec), "{}: no such file or folder", input);
    return {input};
  }
  std::vector<std::string> found;
  for (auto it = fs::recursive_directory_iterator(input, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->path().filename().string().starts_with(".")) {
      it.disable_recursion_pending();
      continue;
    }
    std::error_code entry;
    HONE_CHECK(!it->is_directory(entry) || !is_mds_folder(it->path().string()),
               "{}: MDS shards inside the folder {}: give this folder as an --input of its own (its shard files "
               "are not text)",
               it->path().string(), input);
    const bool regular = it->is_regular_file(entry);
    HONE_CHECK(!entry, "{}: cannot read: {}", it->path().string(), entry.message());  // e.g. a dangling link
    if (regular && is_data_name(it->path().filename().string())) found.push_back(it->path().string());
  }
  HONE_CHECK(!ec, "{}: cannot list: {}", input, ec.message());
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

DocumentReader::DocumentReader(std::span<const std::string> inputs, std::vector<std::string> keys)
    : keys_(std::move(keys)) {
  namespace fs = std::filesystem;
  HONE_CHECK(!keys_.empty(), "no JSON keys given; expected at least one (e.g. text)");
  std::vector<std::pair<std::string, std::string>> named_by;  // each file and the input that named it
  for (const std::string& given : inputs) {
    for (const std::string& input : expand_patterns({given})) {
      for (std::string& file : files_of_input(input)) {
        named_by.emplace_back(file, given);
        files_.push_back(std::move(file));
      }
    }
  }
  check_each_file_once(named_by);
  bool sizes_known = true;
  for (const std::string& file : files_) {
    bytes_before_.push_back(bytes_total_);
    std::error_code ec;
    const bool regular = fs::is_regular_file(file, ec);
    sizes_known = sizes_known && regular;
    if (regular) bytes_total_ += fs::file_size(file, ec);
  }
  bytes_before_.push_back(bytes_total_);
  if (!sizes_known) bytes_total_ = 0;
}

uint64_t DocumentReader::bytes_read() const {
  // The files before the one open, and what of it is read; a text file is read whole.
  if (jsonl_) return bytes_before_[next_file_ - 1] + jsonl_->bytes_read();
  return bytes_before_[records_ ? next_file_ - 1 : next_file_];
}

DocumentReader::~DocumentReader() = default;

bool DocumentReader::next(TextDocument& document) {
  bool is_jsonl_line = false;
  if (!next_unparsed(document, text_, is_jsonl_line)) return false;
  if (is_jsonl_line) parse_jsonl_line(text_, keys_, document.origin, document.fields);
  return true;
}

bool DocumentReader::next_unparsed(TextDocument& document, std::string& line, bool& is_jsonl_line) {
  is_jsonl_line = false;
  while (true) {
    if (records_) {
      if (records_->next(document)) return true;
      records_.reset();
    }
    if (jsonl_) {
      while (jsonl_->read_line(line)) {
        ++line_;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        document.origin = fmt::format("{}:{}", jsonl_->name(), line_);
        is_jsonl_line = true;
        return true;
      }
      jsonl_.reset();
    }
    if (next_file_ == files_.size()) return false;
    const std::string& path = files_[next_file_++];
    if (std::filesystem::is_directory(path) || is_parquet_name(path)) {
      records_ = open_record_text(path, keys_);
      continue;
    }
    const std::string name = std::filesystem::path(path).filename().string();
    // A pipe is JSON Lines, as Megatron reads every input (it cannot be peeked at and read again).
    const bool pipe = !std::filesystem::is_regular_file(path);
    if (is_jsonl_name(name) || (!is_text_name(name) && (pipe || starts_like_jsonl(path)))) {
      jsonl_ = std::make_unique<InputStream>(path);
      line_ = 0;
      continue;
    }
    HONE_CHECK(keys_.size() == 1, "{}: a plain text file is one document with one field, but {} JSON keys were given",
               path, keys_.size());
    HONE_CHECK(!first_line_is_json_object(path),
               "{}: a plain text file by its name is read as one document, but its first line is a JSON object: "
               "name JSON Lines .jsonl (or .json, .ndjson) to read a record a line and its {} key",
               path, keys_.front());
    InputStream in(path);
    document.origin = path;
    document.fields.assign(1, in.read_all());
    const size_t nul = document.fields[0].find('\0');
    HONE_CHECK(nul == std::string::npos,
               "{}: byte {} is NUL: not a text file (binary data, or compressed other than .gz and .zst, which hone "
               "reads)",
               path, nul);
    return true;
  }
}

}  // namespace hone::data
