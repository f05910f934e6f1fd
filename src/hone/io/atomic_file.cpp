#include "hone/io/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "hone/core/error.hpp"

namespace hone {

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  temp_path_ = path_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  HONE_CHECK(fd_ >= 0, "{}: cannot create: {}", temp_path_, std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_path_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    HONE_CHECK(n > 0, "{}: write failed: {}", temp_path_, std::strerror(errno));
    p += n;
    bytes -= size_t(n);
  }
}

void AtomicFile::commit() {
  HONE_CHECK(::fsync(fd_) == 0, "{}: fsync failed: {}", temp_path_, std::strerror(errno));
  HONE_CHECK(::close(fd_) == 0, "{}: close failed: {}", temp_path_, std::strerror(errno));
  fd_ = -1;
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp_path_.c_str());
    fail("{}: cannot rename into place: {}", path_, std::strerror(error));
  }
  std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  sync_directory(parent.empty() ? "." : parent.string());
}

void sync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  HONE_CHECK(fd >= 0, "{}: cannot open folder: {}", dir, std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  HONE_CHECK(rc == 0, "{}: fsync failed: {}", dir, std::strerror(errno));
}

}  // namespace hone
