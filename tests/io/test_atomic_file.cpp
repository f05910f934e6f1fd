// AtomicFile: a file appears whole or not at all, and the temporaries that
// killed writers left behind do not pile up.
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

}  // namespace
}  // namespace hone::test
