// AtomicFile and AtomicFolder: a file or folder appears whole or not at all,
// the temporaries that killed writers left behind do not pile up, and links,
// devices and the working directory are written as a shell would write them.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "hone/io/atomic_file.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

namespace fs = std::filesystem;

// A process id no process has now: a child's, once it has exited and been reaped.
pid_t gone_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

// A writer killed outright (SIGKILL) leaves PATH.tmp.PID; the next writer of
// PATH removes it, and leaves a live writer's and other files' alone; so for
// a folder.
TEST(AtomicFile, RemovesTheTemporariesOfWritersThatAreGone) {
  const std::string dir = testing::TempDir() + "hone_atomic_" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = dir + "/data.bin";
  const std::string stale = path + ".tmp." + std::to_string(gone_pid()),
                    live = path + ".tmp." + std::to_string(::getppid()), other = dir + "/other.bin.tmp.1";
  for (const std::string& p : {stale, live, other, dir + "/data.bin.tmp.x"}) std::ofstream(p) << "partial";
  AtomicFile f(path);
  f.write("whole");
  f.commit();
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));
  EXPECT_TRUE(fs::exists(dir + "/data.bin.tmp.x"));
  std::ifstream in(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "whole");
  // A folder's: the hidden .NAME.tmp.PID folder.
  const std::string stale_folder = dir + "/.shards.tmp." + std::to_string(gone_pid());
  fs::create_directories(stale_folder + "/inner");
  AtomicFolder folder(dir + "/shards", /*replace=*/false);
  std::ofstream(folder.file("a")) << "a";
  folder.commit();
  EXPECT_FALSE(fs::exists(stale_folder));
  EXPECT_TRUE(fs::exists(dir + "/shards/a"));
  fs::remove_all(dir);
}

// A link is followed and stays a link; a device is written in place, never
// replaced by a file (/dev/null stays the device; as root a rename would replace it).
TEST(AtomicFile, WritesThroughLinksAndIntoDevices) {
  const std::string dir = testing::TempDir() + "hone_atomic_links_" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir + "/elsewhere");
  fs::create_symlink(dir + "/elsewhere/real.txt", dir + "/link.txt");  // dangling until written
  fs::create_symlink("/dev/null", dir + "/null");
  // /dev/stdout: a link to /proc/self/fd/1, whose own link names a pipe or
  // terminal by no path (samples_path=/dev/stdout piped on).
  for (const std::string& path :
       {dir + "/link.txt", dir + "/null", std::string("/dev/null"), std::string("/dev/stdout")}) {
    AtomicFile f(path);
    f.write("text");
    EXPECT_EQ(f.commit().bytes, 4u) << path;
  }
  EXPECT_TRUE(fs::is_symlink(dir + "/link.txt"));
  std::ifstream in(dir + "/elsewhere/real.txt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "text");
  EXPECT_TRUE(fs::is_symlink(dir + "/null"));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  EXPECT_EQ(fs::file_size(dir + "/elsewhere/real.txt"), 4u);
  fs::remove_all(dir);
}

// A folder written through a link lands where the link leads (a dangling link's
// target is made); "." (the working directory, empty) takes the files and stays
// the folder the process is in.
TEST(AtomicFolder, WritesThroughLinksAndIntoTheWorkingDirectory) {
  const std::string dir = testing::TempDir() + "hone_atomic_folders_" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir + "/storage/empty");
  fs::create_symlink(dir + "/storage/empty", dir + "/to_empty");
  fs::create_symlink(dir + "/storage/new", dir + "/dangling");
  for (const std::string name : {"to_empty", "dangling"}) {
    check_new_folder(dir + "/" + name);
    AtomicFolder folder(dir + "/" + name, /*replace=*/false);
    std::ofstream(folder.file("a")) << "a";
    folder.commit();
    EXPECT_TRUE(fs::is_symlink(dir + "/" + name)) << name;
    EXPECT_TRUE(fs::exists(dir + "/" + name + "/a")) << name;
  }
  EXPECT_TRUE(fs::exists(dir + "/storage/empty/a"));
  EXPECT_TRUE(fs::exists(dir + "/storage/new/a"));

  const fs::path before = fs::current_path();
  fs::create_directories(dir + "/here");
  fs::current_path(dir + "/here");
  {
    AtomicFolder folder(".", /*replace=*/false);
    std::ofstream(folder.file("b")) << "b";
    folder.commit();
  }
  EXPECT_TRUE(fs::exists("b"));  // the working directory is still there, with the file
  EXPECT_EQ(fs::current_path(), fs::path(dir + "/here"));
  fs::current_path(before);
  EXPECT_TRUE(fs::exists(dir + "/here/b"));
  EXPECT_FALSE(fs::exists(dir + "/.here.tmp." + std::to_string(::getpid())));

  // There the files move one by one: those that make a folder a model last, so
  // that one cut short (here a move that fails) is not taken for one.
  fs::create_directories(dir + "/there");
  fs::current_path(dir + "/there");
  {
    AtomicFolder folder(".", /*replace=*/false);
    for (const std::string name : {"config.json", "manifest.json", "model.safetensors", "tokenizer.json"}) {
      std::ofstream(folder.file(name)) << name;
    }
    fs::create_directories("model.safetensors/in_the_way");
    EXPECT_ANY_THROW(folder.commit());
  }
  fs::current_path(before);
  EXPECT_FALSE(fs::exists(dir + "/there/config.json"));
  EXPECT_FALSE(fs::exists(dir + "/there/manifest.json"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hone::test
