#pragma once
// A whole file mapped read-only into memory: weights are read where they lie
// instead of being copied into a buffer first.
#include <cstddef>
#include <span>
#include <string>

namespace hone {

class MappedFile {
 public:
  // Throws hone::Error naming `path` when it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }
  size_t size() const { return size_; }

 private:
  std::string path_;
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace hone
