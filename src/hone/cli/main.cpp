// `hone`: the command line. Subcommands live in one file each.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <new>
#include <system_error>

#include "hone/cli/commands.hpp"
#include "hone/config/config.hpp"
#include "hone/core/error.hpp"
#include "hone/core/stop_signals.hpp"

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
  add(hone::cli::add_launch_rank);
  add(hone::cli::add_comm_bench);
  add(hone::cli::add_plan);
  add(hone::cli::add_report);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::vector<std::string> names;
    for (const auto& [sub, run] : commands) names.push_back(sub->get_name());
    if (argc > 1 && argv[1][0] != '-' && std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      const std::string near = hone::closest_match(argv[1], names);
      fmt::print(stderr, "hone: error: unknown command '{}'{} (see hone --help)\n", argv[1],
                 near.empty() ? "" : " (did you mean '" + near + "'?)");
      return 2;
    }
    // One line, as every other error: the subcommand's --help lists what it takes.
    std::string help = "hone --help";
    for (const auto& [sub, run] : commands) {
      if (sub->parsed()) help = "hone " + sub->get_name() + " --help";
    }
    // CLI11's "--config: At Most 1 required but received 2", in words.
    std::string what = e.what();
    const std::string at_most_one = ": At Most 1 required but received ";
    if (const size_t at = what.find(at_most_one); at != std::string::npos) {
      what = fmt::format("{} is given {} times: it takes one value", what.substr(0, at),
                         what.substr(at + at_most_one.size()));
    }
    fmt::print(stderr, "hone: error: {} (see {})\n", what, help);
    return 2;
  }
  try {
    for (auto& [sub, run] : commands) {
      if (!sub->parsed()) continue;
      // Before any thread starts. hone launch (and launch-rank) forwards the
      // signals to its processes itself, which must not inherit them blocked.
      if (!sub->get_name().starts_with("launch")) hone::take_stop_signals_on_their_own_thread();
      const int status = run();
      // What a command printed for scripts (eval's JSON line, tokenize's ids)
      // must have reached them: a full disk under a redirect is an error.
      HONE_CHECK(std::fflush(stdout) == 0 && !std::ferror(stdout), "standard output: cannot write: {}",
                 std::strerror(errno));
      return status;
    }
    return 2;
  } catch (const hone::Error& e) {
    hone::report_fatal_error(e.what());
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the system refused (permissions, a file where a folder should be,
    // a full disk): its words name the operation and the path.
    hone::report_fatal_error(e.what());
    return 2;
  } catch (const std::system_error& e) {
    // fmt's print to a stream the system refused (a full disk under stdout).
    hone::report_fatal_error(std::ferror(stdout) ? fmt::format("standard output: {}", e.what()) : e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    hone::report_fatal_error("out of host memory");
    return 1;
  } catch (const std::exception& e) {
    hone::report_fatal_error(e.what(), "internal error");
    return 1;
  }
}
