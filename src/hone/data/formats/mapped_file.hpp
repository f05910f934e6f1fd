#pragma once
// A whole file mapped read-only, and little-endian loads from unaligned bytes
// (every on-disk format here is little-endian and packs fields without padding).
#include <bit>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>

namespace hone::data {

static_assert(std::endian::native == std::endian::little, "the dataset formats are little-endian");

class MappedFile {
 public:
  explicit MappedFile(std::string path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }

 private:
  std::string path_;
  void* data_ = nullptr;
  size_t size_ = 0;
};

template <typename T>
T load_le(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

}  // namespace hone::data
