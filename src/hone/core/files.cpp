#include "hone/core/files.hpp"

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

void create_folders(std::string_view what, const std::string& path) {
  std::error_code error;
  fs::create_directories(path, error);
  HONE_CHECK(!error, "{} {}: cannot create the folder: {}", what, path, error.message());
}

NewFolders::~NewFolders() {
  if (std::uncaught_exceptions() == 0) return;
  std::error_code ignored;
  for (const std::string& folder : made_) fs::remove_all(folder, ignored);
}

void NewFolders::create(std::string_view what, const std::string& path) {
  fs::path outermost;  // the first of path and its parents that does not exist yet
  for (fs::path p = fs::path(path).lexically_normal(); !p.empty() && !fs::exists(p); p = p.parent_path()) {
    outermost = p;
    if (p == p.parent_path()) break;
  }
  create_folders(what, path);
  if (owner_ && !outermost.empty()) made_.push_back(outermost.string());
}

}  // namespace hone
