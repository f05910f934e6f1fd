#pragma once
// Each `hone` subcommand registers its options on the CLI11 app and returns the
// function that runs it.
#include <CLI/CLI.hpp>
#include <functional>

namespace hone::cli {

using Command = std::function<int()>;

Command add_bench(CLI::App& app);

}  // namespace hone::cli
