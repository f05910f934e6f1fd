// hone report RUN_DIR... [--output FILE]: runs' metrics as one HTML page.
#include <fmt/core.h>

#include <filesystem>

#include "hone/cli/commands.hpp"
#include "hone/core/error.hpp"
#include "hone/io/atomic_file.hpp"
#include "hone/train/report.hpp"

namespace hone::cli {

Command add_report(CLI::App& app) {
  struct Args {
    std::vector<std::string> run_dirs;
    std::string output;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "report",
      "Write an HTML page of a run's metrics: summary, loss, learning rate, gradient norm, throughput, MFU "
      "and memory charts (self-contained: open it in any browser); of several runs, one page comparing them");
  sub->add_option("run_dir", args->run_dirs, "The run's output_dir (it holds metrics.jsonl); several to compare them")
      ->required();
  sub->add_option("-o,--output", args->output,
                  "Where to write the page (default: RUN_DIR/report.html; required with several runs)");
  return [args] {
    const RunReport report = render_runs_report(args->run_dirs);  // its errors first (a folder named twice)
    HONE_CHECK(args->run_dirs.size() == 1 || !args->output.empty(),
               "several runs are compared on one page: give -o FILE to say where to write it");
    const std::string output = args->output.empty()
                                   ? (std::filesystem::path(args->run_dirs[0]) / "report.html").string()
                                   : args->output;
    check_report_output(args->run_dirs, output);
    AtomicFile out(output);
    out.write(report.html);
    out.commit();
    fmt::print("wrote {}: {} charts from {} metrics records\n", output, report.charts, report.records);
    return 0;
  };
}

}  // namespace hone::cli
