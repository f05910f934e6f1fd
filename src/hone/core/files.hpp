#pragma once
// Files read whole, and the folders the user names (output_dir, --log-dir, an
// output prefix's folder).
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace hone {

// The whole file; throws hone::Error naming it when it cannot be read (a folder included).
std::string read_file(const std::string& path);

// Appends `text` and a line break to a file a run keeps writing (train.log,
// metrics.jsonl) and flushes it; a write that fails (a full disk) is a
// hone::Error naming `path` and the reason, not a log silently cut short.
void append_line(std::ostream& out, std::string_view text, const std::string& path);
// Flushes `out`, written since the last check: as append_line.
void flush_or_fail(std::ostream& out, const std::string& path);

// Creates `path` and its missing parents. A failure (a file in the way, no
// permission, a read-only file system) is a hone::Error naming `what` (the key or
// flag that gave the path, e.g. "output_dir"), the path and the reason.
void create_folders(std::string_view what, const std::string& path);

// The folders a command makes for its output, removed again, with what was
// written into them, if the command ends in an error (an exception leaves the
// scope) before keep(): a failed run leaves nothing behind. Folders that were
// there before stay as they are.
class NewFolders {
 public:
  NewFolders() = default;
  NewFolders(const NewFolders&) = delete;
  NewFolders& operator=(const NewFolders&) = delete;
  ~NewFolders();
  // create_folders(what, path), remembering the outermost folder it made.
  void create(std::string_view what, const std::string& path);
  // The command's output is worth keeping from now on, whatever happens.
  void keep() { made_.clear(); }
  // The command ends without output (stopped by a signal): the folders go too.
  void discard() { discard_ = true; }

 private:
  bool discard_ = false;
  std::vector<std::string> made_;
};

// An exclusive lock on a folder a run writes into (flock of DIR/.hone.lock),
// held while the object lives: a second run into the same folder is refused,
// naming the process that holds it, instead of interleaving the two runs'
// files. The lock ends with the process, however it ends. Where the file
// system cannot lock (some network file systems), no lock is held.
class FolderLock {
 public:
  // `what` names the folder in the error: "output_dir".
  FolderLock(std::string_view what, const std::string& dir);
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  ~FolderLock();

 private:
  int fd_ = -1;
};

}  // namespace hone
