// hone run RECIPE [--config CONFIG] [key=value ...] | hone validate [--config] CONFIG [key=value ...]
// (ConfigArguments: the config arguments of validate and plan)
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "hone/cli/commands.hpp"
#include "hone/core/error.hpp"
#include "hone/train/recipes.hpp"
#include "hone/train/trainer.hpp"

namespace hone::cli {

Config resolve(const Recipe& recipe, Config config, const std::vector<std::string>& overrides) {
  for (const std::string& o : overrides) config.apply_override(o);
  if (config.has("recipe")) {
    HONE_CHECK(config.get<std::string>("recipe") == recipe.name, "{}: a config for the {} recipe, run with {}",
               config.origin(), config.get<std::string>("recipe"), recipe.name);
  }
  config.set("recipe", recipe.name);
  return recipe.schema.resolve(config);
}

namespace {

// `hone run quickstart`: a config where the recipe goes (tune run takes the
// recipe first too) is answered with the command that runs it.
void refuse_a_config_as_the_recipe(const std::string& name) {
  if (std::ranges::any_of(recipes(), [&](const Recipe& r) { return r.name == name; })) return;
  const std::optional<Config> config = find_config(name);
  if (!config) return;
  const std::string recipe = config->has("recipe") ? config->get<std::string>("recipe") : "RECIPE";
  fail("'{}' is a config, not a recipe: hone run {} --config {} [key=value ...]", name, recipe, name);
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
  sub->add_option("recipe", args->recipe, "Recipe name")->required();
  sub->add_option("--config,-c", args->config, "Built-in config name or YAML file");
  sub->add_option("overrides", args->overrides, "key=value overrides, e.g. optimizer.lr=1e-4 max_steps=100");
  return [args] {
    refuse_a_config_as_the_recipe(args->recipe);
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
  // With --config, what was read as the positional config is the first override.
  std::vector<std::string> overrides = overrides_;
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
