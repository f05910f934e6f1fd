#pragma once
// A file that appears complete or not at all: written under a temporary name in
// the target's folder, fsynced, and renamed over the target by commit(). Without
// commit() (an error, an exception) the temporary file is removed.
#include <cstddef>
#include <string>

namespace hone {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void commit();

 private:
  std::string path_, temp_path_;
  int fd_ = -1;
};

// fsync()s a folder, making a rename inside it durable.
void sync_directory(const std::string& dir);

}  // namespace hone
