// hone ls | hone cp CONFIG DEST.yaml, and how a config name or path is resolved.
#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>

#include "hone/cli/builtin_configs.hpp"
#include "hone/cli/commands.hpp"
#include "hone/core/error.hpp"
#include "hone/io/atomic_file.hpp"
#include "hone/model/config.hpp"
#include "hone/train/recipes.hpp"

namespace hone::cli {

namespace fs = std::filesystem;

std::optional<Config> find_config(const std::string& name_or_path) {
  for (const BuiltinConfig& b : builtin_configs()) {
    if (name_or_path == b.name) return Config::from_yaml(b.text, std::string("configs/") + b.name + ".yaml");
  }
  if (fs::exists(name_or_path)) return Config::from_file(name_or_path);
  return std::nullopt;
}

Config load_config(const std::string& name_or_path) {
  if (std::optional<Config> found = find_config(name_or_path)) return std::move(*found);
  const std::vector<std::string> models = model_preset_names();
  HONE_CHECK(std::ranges::find(models, name_or_path) == models.end(),
             "'{}' is a built-in model, not a config: give a config (hone ls lists them), or the model to a recipe "
             "as model.name={} (hone validate --config quickstart model.name={})",
             name_or_path, name_or_path, name_or_path);
  std::vector<std::string> names;
  for (const BuiltinConfig& b : builtin_configs()) names.push_back(b.name);
  // torchtune's llama3_2/1B_lora_single_device and .._distributed: one config here for any world size.
  for (const char* suffix : {"_single_device", "_distributed"}) {
    if (!name_or_path.ends_with(suffix)) continue;
    const std::string one = name_or_path.substr(0, name_or_path.size() - std::string_view(suffix).size());
    HONE_CHECK(std::ranges::find(names, one) == names.end(),
               "no config named '{}': torchtune's single-device and distributed configs are one here, '{}', which "
               "runs on one device or under hone launch",
               name_or_path, one);
  }
  const std::string suggestion = closest_match(name_or_path, names);
  fail("no config file or built-in config named '{}'{} (hone ls lists the built-in configs)", name_or_path,
       suggestion.empty() ? std::string() : fmt::format("; did you mean '{}'?", suggestion));
}

namespace {

// `hone ls RECIPE`: every key the recipe takes, its default and what it is.
void list_keys(const Recipe& recipe) {
  const std::vector<KeySpec>& keys = recipe.schema.keys();
  size_t key_width = 3, default_width = 7;
  const auto default_of = [](const KeySpec& k) {
    if (k.required) return std::string("(required)");
    if (k.default_value.is_null()) return std::string("-");
    const bool plain_string = k.default_value.is_string() && !k.default_value.get<std::string>().empty();
    return plain_string ? k.default_value.get<std::string>() : k.default_value.dump();
  };
  for (const KeySpec& k : keys) {
    key_width = std::max(key_width, k.key.size());
    default_width = std::max(default_width, default_of(k).size());
  }
  fmt::print("{}: {}\n(hone run {} [--config FILE] [key=value ...]; '-': unset, key=null unsets a key)\n\n", recipe.name, recipe.description,
             recipe.name);
  fmt::print("{:<{}}  {:<{}}  DESCRIPTION\n", "KEY", key_width, "DEFAULT", default_width);
  for (const KeySpec& k : keys) {
    if (k.key == "recipe") continue;
    fmt::print("{:<{}}  {:<{}}  {} ({})\n", k.key, key_width, default_of(k), default_width, k.help, describe_values(k));
  }
}

}  // namespace

Command add_ls(CLI::App& app) {
  auto recipe = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand(
      "ls", "List recipes, built-in configs and built-in models; with a recipe name, the keys that recipe takes");
  sub->add_option("recipe", *recipe, "A recipe whose keys to list (defaults and descriptions)");
  return [recipe] {
    if (!recipe->empty()) {
      // A built-in config or model named where a recipe goes: what to type instead.
      for (const BuiltinConfig& b : builtin_configs()) {
        if (b.name != *recipe) continue;
        const Config c = Config::from_yaml(b.text, b.name);
        const std::string of = c.has("recipe") ? c.get<std::string>("recipe") : "";
        fail("'{}' is a built-in config{}, not a recipe: {}hone cp {} FILE copies it, hone validate {} shows it "
             "resolved",
             *recipe, of.empty() ? "" : " of the " + of + " recipe",
             of.empty() ? "" : fmt::format("hone ls {} lists that recipe's keys, ", of), *recipe, *recipe);
      }
      const std::vector<std::string> models = model_preset_names();
      HONE_CHECK(std::find(models.begin(), models.end(), *recipe) == models.end(),
                 "'{}' is a built-in model, not a recipe: a recipe takes it as model.name={} (hone ls lists the "
                 "recipes)",
                 *recipe, *recipe);
      list_keys(find_recipe(*recipe));
      return 0;
    }
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
    fmt::print("\nhone ls RECIPE lists the keys a recipe takes.\n");
    return 0;
  };
}

Command add_cp(CLI::App& app) {
  struct Args {
    std::string config, dest;
    bool make_parents = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("cp", "Copy a built-in config to a file to edit it");
  sub->add_option("config", args->config, "Built-in config name (hone ls)")->required();
  sub->add_option("dest", args->dest,
                  "Destination file (.yaml added where it has no suffix, as tune cp adds it), or a folder to copy it "
                  "into (as NAME.yaml)")
      ->required()
      ->check(non_empty_path());
  sub->add_flag("--make-parents", args->make_parents, "Create the destination's missing folders (tune cp's flag)");
  return [args] {
    for (const BuiltinConfig& b : builtin_configs()) {
      if (args->config != b.name) continue;
      fs::path dest = args->dest;
      // Into a folder as tune cp does: llama3_2/1B_lora becomes FOLDER/1B_lora.yaml
      // (a name ending in '/' is a folder, made with --make-parents).
      if (fs::is_directory(dest) || dest.filename().empty()) dest /= fs::path(b.name).filename().string() + ".yaml";
      else if (!dest.has_extension()) dest += ".yaml";
      if (args->make_parents && dest.has_parent_path()) fs::create_directories(dest.parent_path());
      if (dest.has_parent_path() && !fs::is_directory(dest.parent_path())) {
        HONE_CHECK(!fs::exists(dest.parent_path()), "{}: not a folder to copy into", dest.parent_path().string());
        fail("{}: no such folder to copy into (--make-parents creates it)", dest.parent_path().string());
      }
      HONE_CHECK(!fs::exists(dest), "{} exists; choose another destination or remove it", dest.string());
      AtomicFile out(dest.string());
      out.write(std::string_view(b.text));
      out.commit();
      fmt::print("copied {} to {}\n", b.name, dest.string());
      return 0;
    }
    load_config(args->config);  // throws with the did-you-mean
    fail("'{}' is not a built-in config (hone ls lists them)", args->config);
  };
}

}  // namespace hone::cli
