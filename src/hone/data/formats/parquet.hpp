#pragma once
// Apache Parquet files, as Hugging Face datasets ship them (pyarrow's writer):
// the footer's Thrift metadata, row groups of column chunks, data pages v1 and
// v2, PLAIN, dictionary, RLE and the DELTA encodings, and uncompressed, Snappy,
// gzip or zstd pages. Values are read by top-level column, each row's value as
// JSON: strings (UTF-8 byte arrays), integers, floats and booleans, and lists of
// those or of structs of them (a chat's `messages`). Layout in docs/formats.md.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

namespace hone::data {

class ParquetFile {
 public:
  explicit ParquetFile(std::string path);
  // A file's bytes held in memory; `name` stands for its path in errors.
  ParquetFile(std::vector<std::byte> bytes, std::string name);
  ~ParquetFile();

  const std::string& path() const;
  int64_t rows() const;
  size_t row_groups() const;
  // The top-level columns, in schema order.
  std::vector<std::string> column_names() const;
  // The rows of row group g as objects of the named top-level columns; with no
  // names, of every column hone can read (others, such as timestamps, are left
  // out). A missing (null) value is left out of its object.
  std::vector<nlohmann::ordered_json> read_rows(size_t g, const std::vector<std::string>& columns = {}) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Snappy's raw block format (what Parquet's SNAPPY codec stores), decoded into
// exactly `size` bytes; `where` names the data in errors.
std::vector<std::byte> snappy_decompress(std::span<const std::byte> data, size_t size, const std::string& where);

}  // namespace hone::data
