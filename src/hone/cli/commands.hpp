#pragma once
// Each `hone` subcommand registers its options on the CLI11 app and returns the
// function that runs it.
#include <CLI/CLI.hpp>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hone/config/config.hpp"

namespace hone {
struct Recipe;
}

namespace hone::cli {

using Command = std::function<int()>;

// An option's check that its value is a whole number above 0, whose error says
// so ("--seq-len: expected a positive whole number, got 0"; CLI::PositiveNumber
// prints the range up to DBL_MAX).
inline CLI::Validator positive_count() {
  return CLI::Validator(
      [](std::string& value) {
        size_t used = 0;
        try {
          if (std::stoll(value, &used) > 0 && used == value.size()) return std::string();
        } catch (const std::exception&) {
        }
        return "expected a positive whole number, got " + value;
      },
      "POSITIVE");
}

// An option's check that its value is a finite number above 0 ("--memory-gb:
// expected a positive number, got 1e400": out of range, not infinity).
inline CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& value) {
        size_t used = 0;
        try {
          const double v = std::stod(value, &used);
          if (std::isfinite(v) && v > 0 && used == value.size()) return std::string();
        } catch (const std::exception&) {
        }
        return "expected a positive number, got " + value;
      },
      "POSITIVE");
}

// A path argument's check that it is not empty ("dest: an empty path names no file or folder").
inline CLI::Validator non_empty_path() {
  return CLI::Validator(
      [](std::string& value) { return value.empty() ? std::string("an empty path names no file or folder") : ""; },
      "PATH");
}

Command add_bench(CLI::App& app);
Command add_convert(CLI::App& app);
Command add_preprocess(CLI::App& app);
Command add_tokenize(CLI::App& app);
Command add_ls(CLI::App& app);
Command add_cp(CLI::App& app);
Command add_run(CLI::App& app);
Command add_validate(CLI::App& app);
Command add_launch(CLI::App& app);
Command add_launch_rank(CLI::App& app);
Command add_comm_bench(CLI::App& app);
Command add_plan(CLI::App& app);
Command add_report(CLI::App& app);

// A built-in config by name ("gpt2/124M_pretrain") or a YAML file; empty when
// there is neither.
std::optional<Config> find_config(const std::string& name_or_path);
// The same, where neither is an error naming the built-in configs.
Config load_config(const std::string& name_or_path);
// The config with its key=value overrides applied, resolved against the recipe's schema.
Config resolve(const Recipe& recipe, Config config, const std::vector<std::string>& overrides);
// A config that names its recipe (an error if it does not), with its overrides
// applied, resolved against that recipe's schema; and the recipe.
std::pair<const Recipe&, Config> resolve_with_its_recipe(Config config, const std::vector<std::string>& overrides);

// The config of a command that reads one without running it (validate, plan):
// named by a positional argument or, as hone run takes it, by --config/-c, and
// followed by key=value overrides.
class ConfigArguments {
 public:
  void add_to(CLI::App& command);
  // The config's recipe (the config must name one) and the config with the
  // overrides applied, resolved against that recipe's schema.
  std::pair<const Recipe&, Config> resolved(const char* command) const;

 private:
  std::string positional_, option_;
  std::vector<std::string> overrides_;
};

}  // namespace hone::cli
