#pragma once
// The configs/ folder, compiled into the binary (cmake/embed_configs.cmake).
#include <string>
#include <vector>

namespace hone::cli {

struct BuiltinConfig {
  const char* name;  // path under configs/ without .yaml: "gpt2/124M_pretrain"
  const char* text;
};

const std::vector<BuiltinConfig>& builtin_configs();

}  // namespace hone::cli
