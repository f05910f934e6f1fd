#pragma once
// Each `hone` subcommand registers its options on the CLI11 app and returns the
// function that runs it.
#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "hone/config/config.hpp"

namespace hone {
struct Recipe;
}

namespace hone::cli {

using Command = std::function<int()>;

Command add_bench(CLI::App& app);
Command add_convert(CLI::App& app);
Command add_preprocess(CLI::App& app);
Command add_tokenize(CLI::App& app);
Command add_ls(CLI::App& app);
Command add_cp(CLI::App& app);
Command add_run(CLI::App& app);
Command add_validate(CLI::App& app);
Command add_launch(CLI::App& app);
Command add_comm_bench(CLI::App& app);
Command add_plan(CLI::App& app);

// A built-in config by name ("gpt2/124M_pretrain") or a YAML file.
Config load_config(const std::string& name_or_path);
// The config with its key=value overrides applied, resolved against the recipe's schema.
Config resolve(const Recipe& recipe, Config config, const std::vector<std::string>& overrides);

}  // namespace hone::cli
