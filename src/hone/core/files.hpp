#pragma once
// Folders the user names (output_dir, --log-dir, an output prefix's folder).
#include <string>
#include <string_view>

namespace hone {

// Creates `path` and its missing parents. A failure (a file in the way, no
// permission, a read-only file system) is a hone::Error naming `what` (the key or
// flag that gave the path, e.g. "output_dir"), the path and the reason.
void create_folders(std::string_view what, const std::string& path);

}  // namespace hone
