#pragma once
// Helpers shared by the format tests: a fresh folder per test, whole-file reads
// and writes, and error checks that insist on naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "hone/core/error.hpp"

namespace hone::test {

namespace fs = std::filesystem;

class FormatsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("hone_formats_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Every entry of the test folder, recursively, as paths relative to it.
  std::vector<std::string> listing() const {
    std::vector<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) out.push_back(fs::relative(e.path(), dir_).string());
    std::sort(out.begin(), out.end());
    return out;
  }

  fs::path dir_;
};

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), std::streamsize(size));
}
inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  write_bytes(path, bytes.data(), bytes.size());
}
inline void write_text(const std::string& path, const std::string& text) { write_bytes(path, text.data(), text.size()); }

// Runs `action`, which must throw hone::Error with every fragment in its message.
inline void expect_error(const std::function<void()>& action, std::initializer_list<std::string> fragments) {
  try {
    action();
    ADD_FAILURE() << "no error; expected one mentioning '" << *fragments.begin() << "'";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const std::string& f : fragments) EXPECT_NE(what.find(f), std::string::npos) << "missing '" << f << "' in: " << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "errors are one line: " << what;
  }
}

// Little-endian bytes of a value, for hand-built expected files.
template <typename T>
void put(std::vector<uint8_t>& out, T value) {
  for (size_t i = 0; i < sizeof value; ++i) out.push_back(uint8_t(uint64_t(value) >> (8 * i)));
}
inline void put_text(std::vector<uint8_t>& out, const std::string& text) { out.insert(out.end(), text.begin(), text.end()); }

}  // namespace hone::test
