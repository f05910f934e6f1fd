#include "hone/io/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <xxhash.h>

#include <fstream>
#include <vector>

#include "hone/core/error.hpp"

namespace hone {

void remove_stale_temporaries(const std::filesystem::path& folder, const std::string& prefix) {
  std::error_code error;
  std::filesystem::directory_iterator it(folder, error);
  for (; !error && it != std::filesystem::directory_iterator(); it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const std::string_view digits = std::string_view(name).substr(prefix.size());
    pid_t pid = 0;
    const auto [end, parse_error] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (parse_error != std::errc() || end != digits.data() + digits.size() || pid <= 0) continue;
    if (::kill(pid, 0) != 0 && errno == ESRCH) {
      std::error_code ignored;  // another process may be removing it too
      std::filesystem::remove_all(it->path(), ignored);
    }
  }
}

namespace {

// Where writing `path` lands: the file or folder its symbolic links lead to
// (a relative link read from the link's folder); `path` itself without links.
std::filesystem::path link_target(std::filesystem::path path) {
  std::error_code error;
  for (int hops = 0; hops < 40 && std::filesystem::is_symlink(path, error); ++hops) {
    const std::filesystem::path to = std::filesystem::read_symlink(path, error);
    if (error) break;
    path = to.is_absolute() ? to : path.parent_path() / to;
  }
  return path;
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  namespace fs = std::filesystem;
  // Found now, not at commit(): the work whose output this is may take long.
  HONE_CHECK(!fs::is_directory(path_), "{}: is a folder; give the name of a file to write", path_);
  const fs::path target = link_target(path_);
  target_ = target.string();
  std::error_code error;
  // Through the path as given, whose links the system follows (/dev/stdout's
  // /proc/self/fd/1 names a pipe by no path).
  const fs::file_status status = fs::status(path_, error);
  if (fs::exists(status) && !fs::is_regular_file(status)) {
    // A device or a pipe: there is nothing to rename over it.
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
  } else {
    remove_stale_temporaries(target.has_parent_path() ? target.parent_path() : ".",
                             target.filename().string() + ".tmp.");
    temp_path_ = target.string() + ".tmp." + std::to_string(::getpid());
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  }
  HONE_CHECK(fd_ >= 0, "{}: cannot create: {}", path_, std::strerror(errno));
  hash_state_ = XXH3_createState();
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(hash_state_));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
  }
  XXH3_freeState(static_cast<XXH3_state_t*>(hash_state_));
}

void AtomicFile::write(const void* data, size_t bytes) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(hash_state_), data, bytes);
  bytes_ += bytes;
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    HONE_CHECK(n > 0, "{}: write failed: {}", path_, std::strerror(errno));
    p += n;
    bytes -= size_t(n);
  }
}

WrittenFile AtomicFile::commit() {
  const WrittenFile written{bytes_, XXH3_64bits_digest(static_cast<XXH3_state_t*>(hash_state_))};
  if (temp_path_.empty()) {  // written in place: a device or pipe has nothing to fsync
    HONE_CHECK(::close(fd_) == 0, "{}: close failed: {}", path_, std::strerror(errno));
    fd_ = -1;
    return written;
  }
  HONE_CHECK(::fsync(fd_) == 0, "{}: fsync failed: {}", path_, std::strerror(errno));
  HONE_CHECK(::close(fd_) == 0, "{}: close failed: {}", path_, std::strerror(errno));
  fd_ = -1;
  if (std::rename(temp_path_.c_str(), target_.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp_path_.c_str());
    fail("{}: cannot rename into place: {}", path_, std::strerror(error));
  }
  std::filesystem::path parent = std::filesystem::path(target_).parent_path();
  sync_directory(parent.empty() ? "." : parent.string());
  return written;
}

namespace {

// What AtomicFolder needs of a target it does not replace: missing or empty.
void check_free(const std::string& path) {
  namespace fs = std::filesystem;
  HONE_CHECK(!fs::exists(path) || (fs::is_directory(path) && fs::is_empty(path)),
             "{}: already exists; give a new folder", path);
}

}  // namespace

void check_new_folder(const std::string& path) {
  namespace fs = std::filesystem;
  check_free(path);
  // Whether it can be made (checked up front; AtomicFolder finds out by making it): a folder made and removed in its nearest existing
  // ancestor (permissions alone do not tell, e.g. for root or under /proc).
  fs::path ancestor = link_target(fs::absolute(path).lexically_normal());
  while (!fs::exists(ancestor) && ancestor.has_parent_path() && ancestor != ancestor.parent_path()) {
    ancestor = ancestor.parent_path();
  }
  HONE_CHECK(fs::is_directory(ancestor), "{}: cannot create the folder: {}", path, std::strerror(ENOTDIR));
  const fs::path probe = ancestor / fmt::format(".hone-probe.{}", ::getpid());
  std::error_code error;
  fs::create_directory(probe, error);
  HONE_CHECK(!error, "{}: cannot create the folder: {}", path, error.message());
  fs::remove(probe, error);
}

AtomicFolder::AtomicFolder(std::string path, bool replace) : path_(std::move(path)) {
  namespace fs = std::filesystem;
  fs::path given = fs::path(path_).lexically_normal();
  if (given.filename().empty()) given = given.parent_path();
  path_ = given.string();
  if (!replace) check_free(path_);
  // Absolute, so that "." has a name and a parent to hold the temporary folder.
  fs::path target = link_target(fs::absolute(path_).lexically_normal());
  if (target.filename().empty() || target.filename() == ".") target = target.parent_path();
  target_ = target.string();
  const fs::path parent = target.parent_path();
  temp_path_ = (parent / fmt::format(".{}.tmp.{}", target.filename().string(), ::getpid())).string();
  std::error_code error;
  fs::create_directories(parent, error);
  if (!error) remove_stale_temporaries(parent, fmt::format(".{}.tmp.", target.filename().string()));
  if (!error) fs::remove_all(temp_path_, error);  // a killed run's of this process id
  if (!error) fs::create_directory(temp_path_, error);
  HONE_CHECK(!error, "{}: cannot create the folder: {}", path_, error.message());
}

AtomicFolder::~AtomicFolder() {
  if (!committed_) {
    std::error_code ignored;
    std::filesystem::remove_all(temp_path_, ignored);
  }
}

std::string AtomicFolder::file(const std::string& name) const {
  return (std::filesystem::path(temp_path_) / name).string();
}

void AtomicFolder::commit() {
  namespace fs = std::filesystem;
  sync_directory(temp_path_);
  std::error_code error;
  const fs::path working = fs::current_path(error);
  const fs::path relative = error ? fs::path() : working.lexically_relative(fs::weakly_canonical(target_, error));
  if (!error && !relative.empty() && *relative.begin() != "..") {
    // The working directory, or a folder above it: removing it would leave this
    // process (and the shell that started it) in a deleted folder. The files
    // move one by one, the ones that make a folder a model last (an HF model's
    // config.json, a hone folder's manifest.json): one cut short is not one.
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(temp_path_)) files.push_back(entry.path());
    const auto last = [](const fs::path& file) {
      return file.filename() == "manifest.json" ? 2 : file.filename() == "config.json" ? 1 : 0;
    };
    std::ranges::stable_sort(files, {}, last);
    for (const fs::path& file : files) fs::rename(file, fs::path(target_) / file.filename());
    fs::remove(temp_path_);
  } else {
    if (fs::exists(target_)) fs::remove_all(target_);  // replaced, or an empty folder
    fs::rename(temp_path_, target_);
  }
  committed_ = true;
  sync_directory(fs::path(target_).parent_path().string());
}

WrittenFile copy_file(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  HONE_CHECK(in.good(), "{}: cannot read", from);
  AtomicFile out(to);
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), std::streamsize(buffer.size()));
    out.write(buffer.data(), size_t(in.gcount()));
  }
  HONE_CHECK(in.eof(), "{}: read failed", from);
  return out.commit();
}

uint64_t file_checksum(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HONE_CHECK(in.good(), "{}: cannot read", path);
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), std::streamsize(buffer.size()));
    XXH3_64bits_update(state, buffer.data(), size_t(in.gcount()));
  }
  const uint64_t digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return digest;
}

std::string checksum_hex(uint64_t checksum) { return fmt::format("{:016x}", checksum); }

void sync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  HONE_CHECK(fd >= 0, "{}: cannot open folder: {}", dir, std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  HONE_CHECK(rc == 0, "{}: fsync failed: {}", dir, std::strerror(errno));
}

}  // namespace hone
