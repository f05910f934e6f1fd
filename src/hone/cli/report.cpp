// hone report RUN_DIR [--output FILE]: the run's metrics as one HTML page.
#include <fmt/core.h>

#include <filesystem>

#include "hone/cli/commands.hpp"
#include "hone/io/atomic_file.hpp"
#include "hone/train/report.hpp"

namespace hone::cli {

Command add_report(CLI::App& app) {
  struct Args {
    std::string run_dir, output;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "report",
      "Write an HTML page of a run's metrics: summary, loss, learning rate, gradient norm, throughput, MFU "
      "and memory charts (self-contained: open it in any browser)");
  sub->add_option("run_dir", args->run_dir, "The run's output_dir (it holds metrics.jsonl)")->required();
  sub->add_option("-o,--output", args->output, "Where to write the page (default: RUN_DIR/report.html)");
  return [args] {
    const RunReport report = render_run_report(args->run_dir);
    const std::string output =
        args->output.empty() ? (std::filesystem::path(args->run_dir) / "report.html").string() : args->output;
    AtomicFile out(output);
    out.write(report.html);
    out.commit();
    fmt::print("wrote {}: {} charts from {} metrics records\n", output, report.charts, report.records);
    return 0;
  };
}

}  // namespace hone::cli
