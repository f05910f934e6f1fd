// hone ls | hone cp CONFIG DEST.yaml, and how a config name or path is resolved.
#include <fmt/core.h>

#include <filesystem>
#include <fstream>

#include "hone/cli/builtin_configs.hpp"
#include "hone/cli/commands.hpp"
#include "hone/core/error.hpp"
#include "hone/io/atomic_file.hpp"
#include "hone/model/config.hpp"
#include "hone/train/recipes.hpp"

namespace hone::cli {

namespace fs = std::filesystem;

Config load_config(const std::string& name_or_path) {
  for (const BuiltinConfig& b : builtin_configs()) {
    if (name_or_path == b.name) return Config::from_yaml(b.text, std::string("configs/") + b.name + ".yaml");
  }
  if (fs::exists(name_or_path)) return Config::from_file(name_or_path);
  std::vector<std::string> names;
  for (const BuiltinConfig& b : builtin_configs()) names.push_back(b.name);
  const std::string suggestion = closest_match(name_or_path, names);
  fail("no config file or built-in config named '{}'{} (hone ls lists the built-in configs)", name_or_path,
       suggestion.empty() ? std::string() : fmt::format("; did you mean '{}'?", suggestion));
}

Command add_ls(CLI::App& app) {
  app.add_subcommand("ls", "List recipes, built-in configs and built-in models");
  return [] {
    fmt::print("RECIPE            DESCRIPTION\n");
    for (const Recipe& r : recipes()) fmt::print("{:<17} {}\n", r.name, r.description);
    fmt::print("\nCONFIG                      RECIPE\n");
    for (const BuiltinConfig& b : builtin_configs()) {
      const Config c = Config::from_yaml(b.text, b.name);
      fmt::print("{:<27} {}\n", b.name, c.has("recipe") ? c.get<std::string>("recipe") : "");
    }
    fmt::print("\nMODELS\n");
    for (const std::string& m : model_preset_names()) {
      fmt::print("{:<15} {:>8.1f}M parameters\n", m, double(model_preset(m).num_params()) / 1e6);
    }
    return 0;
  };
}

Command add_cp(CLI::App& app) {
  auto args = std::make_shared<std::pair<std::string, std::string>>();
  CLI::App* sub = app.add_subcommand("cp", "Copy a built-in config to a file to edit it");
  sub->add_option("config", args->first, "Built-in config name (hone ls)")->required();
  sub->add_option("dest", args->second, "Destination file")->required();
  return [args] {
    for (const BuiltinConfig& b : builtin_configs()) {
      if (args->first != b.name) continue;
      HONE_CHECK(!fs::exists(args->second), "{} exists; choose another destination or remove it", args->second);
      AtomicFile out(args->second);
      out.write(std::string_view(b.text));
      out.commit();
      fmt::print("copied {} to {}\n", b.name, args->second);
      return 0;
    }
    load_config(args->first);  // throws with the did-you-mean
    fail("'{}' is not a built-in config (hone ls lists them)", args->first);
  };
}

}  // namespace hone::cli
