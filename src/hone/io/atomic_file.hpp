#pragma once
// A file that appears complete or not at all: written under a temporary name in
// the target's folder, fsynced, and renamed over the target by commit(). Without
// commit() (an error, an exception) the temporary file is removed. The XXH3-64
// checksum of what was written comes for free (checkpoint manifests use it).
// A symbolic link is followed (the file it names is written; the link stays),
// and a target that is neither a file nor a folder (/dev/stdout, a named pipe)
// is written in place, as a shell's redirection would.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace hone {

// What was committed: its size and XXH3-64 checksum.
struct WrittenFile {
  uint64_t bytes = 0;
  uint64_t checksum = 0;
};

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  WrittenFile commit();

 private:
  std::string path_, target_, temp_path_;  // as given, where it lands (links followed); temp_path_ empty: in place
  int fd_ = -1;
  uint64_t bytes_ = 0;
  void* hash_state_ = nullptr;  // XXH3_state_t, kept out of this header
};

// Removes the temporaries in `folder` named `prefix` + PID whose writers are
// gone: a process killed outright (SIGKILL, out of memory) could not remove its own.
void remove_stale_temporaries(const std::filesystem::path& folder, const std::string& prefix);

// An error unless `path` is free for a new folder: missing where one can be
// made, or an empty folder (what AtomicFolder takes without `replace`).
void check_new_folder(const std::string& path);

// A folder that appears complete or not at all: filled under a temporary name
// beside the target (.NAME.tmp.PID), fsynced and renamed into place by commit().
// Without commit() the temporary folder is removed. A symbolic link is
// followed (the folder it names is made; the link stays); an empty folder that
// is, or holds, the working directory (`hone convert SRC .`) is kept, and the
// files move into it one by one, config.json and manifest.json last.
class AtomicFolder {
 public:
  // An existing target is replaced at commit() when `replace`; otherwise a
  // target that exists and is not an empty folder is an error here.
  AtomicFolder(std::string path, bool replace);
  ~AtomicFolder();
  AtomicFolder(const AtomicFolder&) = delete;
  AtomicFolder& operator=(const AtomicFolder&) = delete;

  // Where the file `name` goes until commit().
  std::string file(const std::string& name) const;
  void commit();

 private:
  std::string path_, target_, temp_path_;  // path_ as given (for messages); target_ where it lands
  bool committed_ = false;
};

// Copies a file through an AtomicFile (so the copy is durable and checksummed).
WrittenFile copy_file(const std::string& from, const std::string& to);

// XXH3-64 of a whole file, streamed; throws hone::Error if it cannot be read.
uint64_t file_checksum(const std::string& path);
std::string checksum_hex(uint64_t checksum);

// fsync()s a folder, making a rename inside it durable.
void sync_directory(const std::string& dir);

}  // namespace hone
