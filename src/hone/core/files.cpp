#include "hone/core/files.hpp"

#include <filesystem>
#include <system_error>

#include "hone/core/error.hpp"

namespace hone {

void create_folders(std::string_view what, const std::string& path) {
  std::error_code error;
  std::filesystem::create_directories(path, error);
  HONE_CHECK(!error, "{} {}: cannot create the folder: {}", what, path, error.message());
}

}  // namespace hone
