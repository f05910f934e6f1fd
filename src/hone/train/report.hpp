#pragma once
// `hone report RUN_DIR...`: a run's metrics.jsonl as one self-contained HTML page
// (a summary table and inline SVG charts of loss, learning rate, gradient norm,
// throughput, MFU and memory; no scripts, nothing fetched), with the run's
// config.yaml and perf_summary.csv where present; or several runs on one page
// to compare them.
#include <cstdint>
#include <string>
#include <vector>

namespace hone {

struct RunReport {
  std::string html;
  int64_t records = 0;  // metrics.jsonl records read (of all runs)
  int charts = 0;       // charts drawn (those with data)
};

// Reads RUN_DIR/metrics.jsonl (required), config.yaml and perf_summary.csv.
// A step logged twice (a run resumed from a checkpoint older than its last
// log) keeps its last value. A last line cut short (the run was killed while
// writing it) is skipped and said so in the page; any other malformed line is
// an error naming the file and line.
RunReport render_run_report(const std::string& run_dir);
// Several runs read as above, on one page: a summary column and a chart color
// per run (validation dashed), and the config keys whose values differ.
RunReport render_runs_report(const std::vector<std::string>& run_dirs);
// Throws hone::Error when `output` is an existing file of a run (its
// metrics.jsonl, config.yaml, perf_summary.csv or train.log, of these runs or
// another): the page would take its place.
void check_report_output(const std::vector<std::string>& run_dirs, const std::string& output);

}  // namespace hone
