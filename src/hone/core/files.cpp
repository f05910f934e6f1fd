#include "hone/core/files.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "hone/core/error.hpp"

namespace hone {

namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  // A folder opens as a file and reads as nothing.
  HONE_CHECK(!fs::is_directory(path), "{}: a folder, not a file", path);
  std::ifstream in(path, std::ios::binary);
  HONE_CHECK(in.good(), "cannot read {}: {}", path, std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  HONE_CHECK(!in.bad(), "cannot read {}: {}", path, std::strerror(errno));
  return std::move(s).str();
}

void flush_or_fail(std::ostream& out, const std::string& path) {
  out.flush();
  HONE_CHECK(out.good(), "{}: cannot write: {}", path, errno != 0 ? std::strerror(errno) : "the write failed");
}

void append_line(std::ostream& out, std::string_view text, const std::string& path) {
  errno = 0;  // the reason of a failure below, not an earlier one's
  out << text << '\n';
  flush_or_fail(out, path);
}

void create_folders(std::string_view what, const std::string& path) {
  std::error_code error;
  // A link to a folder that is not there would fail as "File exists".
  if (fs::is_symlink(path, error) && !fs::exists(path, error)) {
    fail("{} {}: a link to {}, which does not exist: make that folder, or give another {}", what, path,
         fs::read_symlink(path, error).string(), what);
  }
  fs::create_directories(path, error);
  HONE_CHECK(!error, "{} {}: cannot create the folder: {}", what, path, error.message());
}

NewFolders::~NewFolders() {
  if (std::uncaught_exceptions() == 0 && !discard_) return;
  std::error_code ignored;
  for (const std::string& folder : made_) fs::remove_all(folder, ignored);
}

void NewFolders::create(std::string_view what, const std::string& path) {
  // Each of the path's prefixes, as written, that does not exist yet: "a/../b"
  // makes a and b (a prefix like "a/.." that is an existing folder once
  // normalized is none).
  std::vector<fs::path> missing;
  for (fs::path p = path; !p.empty(); p = p.parent_path()) {
    const fs::path normal = p.lexically_normal();
    if (!fs::exists(p) && !fs::exists(normal)) missing.push_back(normal);
    if (p == p.parent_path()) break;
  }
  create_folders(what, path);
  // The outermost of them: removing it removes those inside.
  const auto inside = [](const fs::path& folder, const fs::path& outer) {
    const fs::path relative = folder.lexically_relative(outer);
    return !relative.empty() && relative != "." && *relative.begin() != "..";
  };
  for (const fs::path& folder : missing) {
    if (std::ranges::none_of(missing, [&](const fs::path& outer) { return inside(folder, outer); })) {
      made_.push_back(folder.string());
    }
  }
}

FolderLock::FolderLock(std::string_view what, const std::string& dir) {
  const std::string path = (fs::path(dir) / ".hone.lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  HONE_CHECK(fd_ >= 0, "{} {}: cannot create {}: {}", what, dir, path, std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    if (error != EWOULDBLOCK) return;  // a file system without locks: run unlocked
    std::string holder(256, '\0');
    const ssize_t n = ::pread(fd_, holder.data(), holder.size(), 0);
    holder.resize(size_t(std::max<ssize_t>(n, 0)));
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
    ::close(fd_);
    fd_ = -1;
    fail("{} {} is in use by another run ({}): wait for it to end, or give another {}", what, dir,
         holder.empty() ? "a process holds " + path : holder, what);
  }
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string holder = fmt::format("process {} on {}\n", ::getpid(), host);
  // Who holds it, for a second run's message only.
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, holder.data(), holder.size(), 0);
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

}  // namespace hone
