#pragma once
// The asset cache of scripts/fetch-assets.sh, fetched on first use.
#include <array>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "support/check.hpp"

namespace hone::test {

// Runs scripts/fetch-assets.sh once per process and returns the cache folder it prints last.
inline const std::string& asset_cache() {
  static const std::string dir = [] {
    const std::string command = "bash '" + source_path("scripts/fetch-assets.sh") + "' 2>&1";
    FILE* pipe = popen(command.c_str(), "r");
    if (!pipe) throw std::runtime_error("cannot run " + command);
    std::string output;
    std::array<char, 4096> buffer;
    while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
    if (pclose(pipe) != 0) throw std::runtime_error("scripts/fetch-assets.sh failed:\n" + output);
    while (!output.empty() && output.back() == '\n') output.pop_back();
    return output.substr(output.rfind('\n') + 1);
  }();
  return dir;
}

inline std::string asset_path(const std::string& relative) { return asset_cache() + "/" + relative; }

}  // namespace hone::test
