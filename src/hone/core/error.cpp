#include "hone/core/error.hpp"

#include <cstdio>
#include <fstream>

namespace hone {

namespace {

std::string& fatal_error_log() {
  static std::string path;
  return path;
}

}  // namespace

void set_fatal_error_log(std::string path) { fatal_error_log() = std::move(path); }

void report_fatal_error(std::string_view text, std::string_view prefix) {
  std::fflush(stdout);
  const std::string line = fmt::format("hone: {}: {}\n", prefix, text);
  std::fputs(line.c_str(), stderr);
  if (!fatal_error_log().empty()) std::ofstream(fatal_error_log(), std::ios::app) << line;
}

}  // namespace hone
