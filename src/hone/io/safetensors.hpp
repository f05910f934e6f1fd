#pragma once
// The safetensors format (Hugging Face): u64 little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
// then the raw tensor bytes. Files are memory-mapped; every offset in the header
// is checked before use, so a lying header is an error, not a crash.
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hone/core/tensor.hpp"
#include "hone/io/atomic_file.hpp"

namespace hone {

class SafetensorsFile {
 public:
  struct Entry {
    DType dtype;
    Shape shape;
    std::span<const std::byte> bytes;  // inside the mapped file
  };

  // Opens and validates `path`; throws hone::Error naming the file and the problem.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // in file order
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const Entry& entry(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // A CPU tensor holding a copy of `name` in its stored dtype.
  Tensor load(const std::string& name) const;

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, Entry> entries_;
  std::vector<std::string> order_;
  std::map<std::string, std::string> metadata_;
};

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// Writes tensors (any device; copied to host) to `path` atomically: a temporary
// file in the same folder, fsynced, then renamed over `path`.
WrittenFile write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// "F32", "BF16", ... <-> DType.
std::string safetensors_dtype_name(DType dtype);
DType parse_safetensors_dtype(const std::string& name, const std::string& context);

}  // namespace hone
