#include "hone/core/files.hpp"

#include <exception>
#include <filesystem>
#include <system_error>

#include "hone/core/error.hpp"

namespace hone {

namespace fs = std::filesystem;

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
