// Folders made for a command's output: created, and removed when it fails.
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "hone/core/files.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

namespace fs = std::filesystem;

class NewFoldersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::TempDir() + "hone_new_folders_" + std::to_string(::getpid());
    fs::remove_all(root_);
    fs::create_directories(root_ + "/there");
  }
  void TearDown() override { fs::remove_all(root_); }
  // Makes `path` in a scope that ends by an exception when `fail`.
  void make(const std::string& path, bool fail, bool keep = false) {
    try {
      NewFolders folders;
      folders.create("output_dir", path);
      std::ofstream(path + "/file") << "written";
      if (keep) folders.keep();
      if (fail) throw std::runtime_error("failed");
    } catch (const std::runtime_error&) {
    }
  }
  std::string root_;
};

TEST_F(NewFoldersTest, AFailedCommandRemovesTheFoldersItMadeAndNoOthers) {
  make(root_ + "/a/b/c", /*fail=*/true);
  EXPECT_FALSE(fs::exists(root_ + "/a"));  // the outermost folder it made, with what is in it
  make(root_ + "/there/d", /*fail=*/true);
  EXPECT_FALSE(fs::exists(root_ + "/there/d"));
  EXPECT_TRUE(fs::exists(root_ + "/there"));  // there before
  make(root_ + "/there", /*fail=*/true);
  EXPECT_TRUE(fs::exists(root_ + "/there/file"));
  make(root_ + "/ok", /*fail=*/false);
  EXPECT_TRUE(fs::exists(root_ + "/ok/file"));
  make(root_ + "/kept", /*fail=*/true, /*keep=*/true);
  EXPECT_TRUE(fs::exists(root_ + "/kept/file"));
  // A path through a folder it made: both go.
  make(root_ + "/gone/../also", /*fail=*/true);
  EXPECT_FALSE(fs::exists(root_ + "/gone"));
  EXPECT_FALSE(fs::exists(root_ + "/also"));
  make(root_ + "/there/../new/x", /*fail=*/true);
  EXPECT_FALSE(fs::exists(root_ + "/new"));
  EXPECT_TRUE(fs::exists(root_ + "/there/file"));
}

TEST_F(NewFoldersTest, AFolderThatCannotBeMadeIsAnErrorNamingTheKey) {
  std::ofstream(root_ + "/file") << "x";
  EXPECT_EQ(error_of([&] { create_folders("output_dir", root_ + "/file/run"); }),
            "output_dir " + root_ + "/file/run: cannot create the folder: Not a directory");
  fs::create_symlink(root_ + "/gone", root_ + "/link");
  EXPECT_EQ(error_of([&] { create_folders("output_dir", root_ + "/link"); }),
            "output_dir " + root_ + "/link: a link to " + root_ + "/gone, which does not exist: make that folder, or "
            "give another output_dir");
}

}  // namespace
}  // namespace hone::test
