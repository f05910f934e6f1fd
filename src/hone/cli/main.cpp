// `hone`: the command line. Subcommands live in one file each.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <new>

#include "hone/cli/commands.hpp"
#include "hone/core/error.hpp"

#ifndef HONE_VERSION
#define HONE_VERSION "unknown"
#endif

int main(int argc, char** argv) {
  CLI::App app{"hone: train and fine-tune large language models, one native binary"};
  app.set_version_flag("--version", std::string("hone ") + HONE_VERSION);
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, hone::cli::Command>> commands;
  auto add = [&](hone::cli::Command (*make)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    hone::cli::Command run = make(app);
    commands.emplace_back(app.get_subcommands({})[before], std::move(run));
  };
  add(hone::cli::add_ls);
  add(hone::cli::add_cp);
  add(hone::cli::add_validate);
  add(hone::cli::add_run);
  add(hone::cli::add_bench);
  add(hone::cli::add_convert);
  add(hone::cli::add_preprocess);
  add(hone::cli::add_tokenize);
  add(hone::cli::add_launch);
  add(hone::cli::add_comm_bench);
  add(hone::cli::add_plan);
  add(hone::cli::add_report);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    for (auto& [sub, run] : commands) {
      if (sub->parsed()) return run();
    }
    return 2;
  } catch (const hone::Error& e) {
    std::fflush(stdout);
    fmt::print(stderr, "hone: error: {}\n", e.what());
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the system refused (permissions, a file where a folder should be,
    // a full disk): its words name the operation and the path.
    std::fflush(stdout);
    fmt::print(stderr, "hone: error: {}\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    fmt::print(stderr, "hone: error: out of host memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "hone: internal error: {}\n", e.what());
    return 1;
  }
}
