#pragma once
// Where a run's numbers go: metrics.jsonl (one record per logged step, the
// metric names of docs/architecture.md), TensorBoard event files, and a
// perf_summary.csv row at the end; and the console, which tees into train.log.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hone/train/tensorboard.hpp"

namespace hone {

using Metrics = std::vector<std::pair<std::string, double>>;

class MetricsWriter {
 public:
  // Appends to the run's files: a run resumed after `steps_done` steps
  // continues them, and the records of later steps, which the steps after the
  // checkpoint it resumes wrote, are dropped from metrics.jsonl and purged from
  // TensorBoard's view (as torch's SummaryWriter(purge_step)). A writer that is
  // not `enabled` (ranks other than 0) writes nothing.
  MetricsWriter(const std::string& run_dir, bool tensorboard, bool enabled = true, int64_t steps_done = 0);
  void write(int64_t step, const Metrics& metrics);
  // How many records of metrics.jsonl the constructor dropped.
  int64_t dropped_records() const { return dropped_records_; }

 private:
  std::string jsonl_path_;
  std::ofstream jsonl_;
  int64_t dropped_records_ = 0;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

// One row of perf_summary.csv: the figures benchmark scripts extract, for the
// steps one process trained (a resumed run adds a row for its own).
struct PerfSummary {
  std::string model, precision;
  int world_size = 1;
  int64_t global_batch_size = 0, seq_len = 0;
  double tokens_per_sec = 0, samples_per_sec = 0, tokens_per_sec_per_device = 0, mfu = 0;
  size_t peak_memory_bytes = 0;
  double final_loss = 0;
  int64_t first_step = 0, last_step = 0;  // the steps trained: first_step + 1 ... last_step
  double train_seconds = 0;               // in those steps
  std::string finished_at;                // UTC, ISO 8601
};
// Appends `row`, writing the header first into a new file. A file of an older
// hone, whose header lacks the last columns, gets them (empty in its rows).
void append_perf_summary(const std::string& run_dir, const PerfSummary& row);
// The current time, UTC, as 2026-11-30T16:42:05Z.
std::string utc_timestamp();

// Console output of a run: lines go to stderr and train.log; on a terminal a
// progress line (step, loss, tokens/s, ETA) is redrawn in place and never
// logged, and the per-step status lines go to train.log only. The error that
// ends the process, if one does, is appended to train.log as well.
class RunConsole {
 public:
  // A console that is not `enabled` (ranks other than 0) shows and logs nothing.
  explicit RunConsole(const std::string& run_dir, bool enabled = true);
  ~RunConsole();
  void line(const std::string& text);
  // A line for train.log that a terminal does not need (its progress bar shows
  // the same); printed too when the output is not a terminal.
  void status_line(const std::string& text);
  void progress(int64_t step, int64_t total_steps, double loss, double tokens_per_sec, double eta_seconds);
  // On a terminal only, in place of the progress bar until the next line: what
  // a long pause is (saving a checkpoint). Never logged.
  void transient(const std::string& text);

 private:
  void clear_progress();
  std::string log_path_;
  std::ofstream log_;
  bool enabled_;
  bool interactive_ = false;
  bool progress_shown_ = false;
};

std::string format_duration(double seconds);

}  // namespace hone
