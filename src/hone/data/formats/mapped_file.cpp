#include "hone/data/formats/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "hone/core/error.hpp"

namespace hone::data {

MappedFile::MappedFile(std::string path) : path_(std::move(path)) {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  HONE_CHECK(fd >= 0, "{}: cannot open: {}", path_, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    fail("{}: cannot stat: {}", path_, std::strerror(error));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file", path_);
  }
  size_ = size_t(st.st_size);
  // mmap of length 0 fails; an empty file is an empty span.
  if (size_ > 0) data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int error = errno;
  ::close(fd);
  if (data_ == MAP_FAILED) {
    data_ = nullptr;
    fail("{}: cannot map: {}", path_, std::strerror(error));
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

}  // namespace hone::data
