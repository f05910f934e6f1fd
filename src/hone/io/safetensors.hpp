#pragma once
// The safetensors format (Hugging Face): u64 little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
// then the raw tensor bytes. Files are memory-mapped; every offset in the header
// is checked before use, so a lying header is an error, not a crash.
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "hone/core/tensor.hpp"
#include "hone/io/atomic_file.hpp"
#include "hone/io/mapped_file.hpp"
#include "hone/io/tensor_file.hpp"

namespace hone {

class SafetensorsFile final : public TensorFile {
 public:
  // The header of a safetensors file held in memory, checked against the
  // memory's size: entries point into `file`. Throws hone::Error naming `path`,
  // the tensor and the problem (also the parser the fuzz target drives).
  struct Header {
    std::map<std::string, Entry> entries;
    std::map<std::string, std::string> unreadable;  // tensors of dtypes hone has none for: why
    std::vector<std::string> order;  // by data offset, the unreadable too
    std::map<std::string, std::string> metadata;
  };
  static Header parse(std::span<const std::byte> file, const std::string& path);

  // Opens and validates `path`; throws hone::Error naming the file and the problem.
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const override { return file_.path(); }
  std::vector<std::string> names() const override { return header_.order; }
  bool contains(const std::string& name) const override {
    return header_.entries.contains(name) || header_.unreadable.contains(name);
  }
  const Entry& entry(const std::string& name) const override;
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }

  // A CPU tensor holding a copy of `name` in its stored dtype.
  Tensor load(const std::string& name) const;

 private:
  MappedFile file_;
  Header header_;
};

// Writes a safetensors file whose tensors come one at a time, so that a file
// larger than memory can be written: the header (every name, dtype and shape)
// first, then each tensor's bytes in the same order. Atomic like AtomicFile.
class SafetensorsWriter {
 public:
  struct Layout {
    std::string name;
    DType dtype;
    Shape shape;
  };
  SafetensorsWriter(const std::string& path, const std::vector<Layout>& layout,
                    const std::map<std::string, std::string>& metadata = {});
  // The next tensor in layout order (any device; copied to host); its dtype and
  // shape must be the layout's.
  void write(const Tensor& tensor);
  WrittenFile commit();

 private:
  std::string path_;
  std::vector<Layout> layout_;
  size_t next_ = 0;
  AtomicFile out_;
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
