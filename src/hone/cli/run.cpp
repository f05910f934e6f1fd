// hone run RECIPE [--config CONFIG] [key=value ...] | hone validate [--config] CONFIG [key=value ...]
// (ConfigArguments: the config arguments of validate and plan, which take hone run's too)
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "hone/cli/builtin_configs.hpp"
#include "hone/cli/commands.hpp"
#include "hone/core/error.hpp"
#include "hone/train/recipes.hpp"
#include "hone/train/trainer.hpp"

namespace hone::cli {

Config resolve(const Recipe& recipe, Config config, const std::vector<std::string>& overrides) {
  for (const std::string& o : overrides) config.apply_override(o);
  if (config.has("recipe")) {
    HONE_CHECK(config.get<std::string>("recipe") == recipe.name, "{}: a config for the {} recipe, run with {}",
               config.place_of("recipe"), config.get<std::string>("recipe"), recipe.name);
  }
  config.set("recipe", recipe.name);
  return recipe.schema.resolve(config);
}

namespace {

bool is_override(const std::string& word) { return word.find('=') != std::string::npos || word.starts_with('~'); }

// A built-in config's name or a YAML file: a word read as a config in the hints
// below (another file, a data folder, is left to the usual errors).
std::optional<Config> as_config(const std::string& word) {
  const bool yaml_file = (word.ends_with(".yaml") || word.ends_with(".yml")) && std::filesystem::is_regular_file(word);
  const bool built_in =
      std::ranges::any_of(builtin_configs(), [&](const BuiltinConfig& b) { return word == b.name; });
  return yaml_file || built_in ? find_config(word) : std::nullopt;
}

// The recipe a config names, or "RECIPE".
std::string recipe_of(const std::optional<Config>& config) {
  return config && config->has("recipe") ? config->get<std::string>("recipe") : "RECIPE";
}

// What goes where the recipe goes, when it is not one: a config (`hone run
// quickstart`; tune run takes the recipe first too), an override, or nothing,
// is answered with the command that runs it.
void check_the_recipe_argument(const std::string& name, const std::string& config_name) {
  if (std::ranges::any_of(recipes(), [&](const Recipe& r) { return r.name == name; })) return;
  const std::optional<Config> config = config_name.empty() ? std::nullopt : as_config(config_name);
  const std::string with_config = config_name.empty() ? "" : " --config " + config_name;
  if (name.empty()) fail("which recipe? hone run {}{} [key=value ...]", recipe_of(config), with_config);
  if (is_override(name)) {
    fail("'{}' is an override where the recipe goes: hone run {}{} {} ...", name, recipe_of(config), with_config, name);
  }
  if (const std::optional<Config> named = as_config(name)) {
    fail("'{}' is a config, not a recipe: hone run {} --config {} [key=value ...]", name, recipe_of(named), name);
  }
}

// `hone run pretrain quickstart`: a config among the overrides of `command`,
// which has `given_config` (or none yet).
void check_overrides(const std::vector<std::string>& overrides, std::string_view command,
                     const std::string& given_config) {
  for (const std::string& o : overrides) {
    if (is_override(o) || !as_config(o)) continue;
    if (given_config.empty()) fail("'{}' is a config where key=value overrides go: give it as --config {}", o, o);
    fail("'{}' is a config where key=value overrides go: {} takes one config ({} is given)", o, command,
         given_config);
  }
}

}  // namespace

Command add_run(CLI::App& app) {
  struct Args {
    std::string recipe, config;
    std::vector<std::string> overrides;
  };
  auto args = std::make_shared<Args>();
  std::vector<std::string> names;  // from the recipe table, so that the help never misses one
  for (const Recipe& r : recipes()) names.push_back(r.name);
  CLI::App* sub = app.add_subcommand(
      "run", fmt::format("Run a recipe: {} (hone ls lists them; hone ls RECIPE lists a recipe's keys)",
                         fmt::join(names, ", ")));
  sub->add_option("recipe", args->recipe, "Recipe name");
  sub->add_option("--config,-c", args->config, "Built-in config name or YAML file");
  sub->add_option("overrides", args->overrides, "key=value overrides, e.g. optimizer.lr=1e-4 max_steps=100");
  return [args] {
    check_the_recipe_argument(args->recipe, args->config);
    check_overrides(args->overrides, "hone run", args->config);
    const Recipe& recipe = find_recipe(args->recipe);
    const Config base = args->config.empty() ? Config() : load_config(args->config);
    return recipe.run(resolve(recipe, base, args->overrides));
  };
}

void ConfigArguments::add_to(CLI::App& command) {
  command.add_option("config", positional_, "Built-in config name or YAML file");
  command.add_option("--config,-c", option_, "The same, given as hone run takes it");
  command.add_option("overrides", overrides_, "key=value overrides of the config");
}

std::pair<const Recipe&, Config> ConfigArguments::resolved(const char* command) const {
  std::vector<std::string> overrides = overrides_;
  // A recipe where the config goes, as hone run takes it: `hone validate full_finetune [--config C] key=value`.
  if (std::ranges::any_of(recipes(), [&](const Recipe& r) { return r.name == positional_; }) &&
      !std::filesystem::exists(positional_)) {
    check_overrides(overrides, fmt::format("hone {}", command), option_);
    const Recipe& recipe = find_recipe(positional_);
    return {recipe, resolve(recipe, option_.empty() ? Config() : load_config(option_), overrides)};
  }
  // With --config, what was read as the positional config is the first override.
  std::string name = positional_;
  if (!option_.empty()) {
    HONE_CHECK(name.empty() || name.find('=') != std::string::npos || name.starts_with('~'),
               "{}: one config at a time: '{}' and --config {} are two (the other settings go as key=value)",
               command, name, option_);
    if (!name.empty()) overrides.insert(overrides.begin(), name);
    name = option_;
  }
  HONE_CHECK(!name.empty(), "{}: which config? hone {} CONFIG [key=value ...] (hone ls lists them)", command,
             command);
  check_overrides(overrides, fmt::format("hone {}", command), name);
  return resolve_with_its_recipe(load_config(name), overrides);
}

namespace {

// The recipe another tool's config (without `recipe`) is likely for: a
// torchtune config names its model builder (lora_llama3_2_1b) and its loss
// (DPOLoss); empty where nothing tells.
std::string likely_recipe(const Config& config) {
  const Json& tree = config.tree();
  const auto component = [&](const char* section) {
    const Json& s = tree.value(section, Json());
    return s.is_object() && s.value("_component_", Json()).is_string() ? s["_component_"].get<std::string>()
                                                                         : std::string();
  };
  const std::string model = component("model"), loss = component("loss");
  const bool lora = model.find("lora_") != std::string::npos || model.find("qlora_") != std::string::npos;
  if (loss.find("DPO") != std::string::npos || loss.find("SimPO") != std::string::npos) {
    return lora ? "lora_dpo" : "full_dpo";
  }
  if (lora) return "lora_finetune";
  if (!model.empty() && tree.contains("checkpointer")) return "full_finetune";
  return "";
}

}  // namespace

std::pair<const Recipe&, Config> resolve_with_its_recipe(Config config, const std::vector<std::string>& overrides) {
  for (const std::string& o : overrides) {  // recipe=pretrain on the command line names it for another tool's config
    if (o.starts_with("recipe=")) config.apply_override(o);
  }
  if (!config.has("recipe")) {
    std::vector<std::string> names;
    for (const Recipe& r : recipes()) names.push_back(r.name);
    const std::string likely = likely_recipe(config);
    fail("{}: the config names no recipe: add 'recipe: NAME', or recipe=NAME ({}){}", config.origin(),
         fmt::join(names, ", "),
         likely.empty() ? std::string()
                        : fmt::format("; by its components, a torchtune config for {}", likely));
  }
  const Recipe& recipe = find_recipe(config.get<std::string>("recipe"));
  return {recipe, resolve(recipe, std::move(config), overrides)};
}

Command add_validate(CLI::App& app) {
  auto args = std::make_shared<ConfigArguments>();
  CLI::App* sub = app.add_subcommand(
      "validate", "Check a config: print it resolved, with the parameter count and a memory estimate");
  args->add_to(*sub);
  return [args] {
    const auto [recipe, resolved] = args->resolved("validate");
    if (recipe.training_shape) check_training_settings(resolved);
    const std::vector<std::string> summary = recipe.summarize(resolved);  // its errors before any output
    fmt::print("{}", resolved.to_yaml());
    for (const std::string& line : summary) fmt::print("# {}\n", line);
    if (resolved.has("output_dir")) {
      for (const auto& conflict : {output_dir_conflict(resolved), resume_conflict(resolved)}) {
        if (conflict) fmt::print("# note: hone run would refuse this now: {}\n", *conflict);
      }
    }
    fmt::print("# {}: valid for the {} recipe\n", resolved.origin(), recipe.name);
    return 0;
  };
}

}  // namespace hone::cli
