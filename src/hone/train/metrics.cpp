#include "hone/train/metrics.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hone/core/error.hpp"
#include "hone/core/files.hpp"
#include "hone/core/text.hpp"
#include "hone/io/atomic_file.hpp"

namespace hone {

namespace fs = std::filesystem;

namespace {

// A record cut off at the end of `path` (the run that wrote it was killed, or
// its disk filled) is dropped, so that the records appended next start a line.
void drop_torn_last_line(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return;
  const auto size = int64_t(in.tellg());
  int64_t end = size;  // one past the last '\n' seen, scanning back a block at a time
  std::string block;
  while (end > 0) {
    const int64_t from = std::max<int64_t>(0, end - 4096);
    block.resize(size_t(end - from));
    in.seekg(from);
    in.read(block.data(), std::streamsize(block.size()));
    const size_t newline = block.rfind('\n');
    if (newline != std::string::npos) {
      end = from + int64_t(newline) + 1;
      break;
    }
    end = from;
  }
  in.close();
  if (end < size) fs::resize_file(path, uintmax_t(end));
}

// Rewrites `path` without its records of steps after `steps_done`; returns how
// many it dropped (none: the file is left as it is).
int64_t drop_records_after(const std::string& path, int64_t steps_done) {
  std::ifstream in(path);
  if (!in) return 0;
  std::string kept;
  int64_t dropped = 0;
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const auto step = record.is_object() ? record.find("step") : record.end();
    if (record.is_object() && step != record.end() && step->is_number_integer() && step->get<int64_t>() > steps_done) {
      ++dropped;
    } else {
      kept += line + "\n";
    }
  }
  if (dropped > 0) {
    AtomicFile rewritten(path);
    rewritten.write(kept);
    rewritten.commit();
  }
  return dropped;
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& run_dir, bool tensorboard, bool enabled, int64_t steps_done) {
  if (!enabled) return;
  fs::create_directories(run_dir);
  jsonl_path_ = (fs::path(run_dir) / "metrics.jsonl").string();
  drop_torn_last_line(jsonl_path_);
  // A run going on from step N keeps the records up to N (its evaluation at N
  // included); one starting over (no checkpoint) keeps none, step 0's included.
  const int64_t kept_through = steps_done > 0 ? steps_done : -1;
  dropped_records_ = drop_records_after(jsonl_path_, kept_through);
  jsonl_.open(jsonl_path_, std::ios::app);
  HONE_CHECK(jsonl_.good(), "{}: cannot open for writing", jsonl_path_);
  if (tensorboard) {
    tensorboard_ = std::make_unique<TensorBoardWriter>((fs::path(run_dir) / "tensorboard").string());
    if (steps_done > 0 || dropped_records_ > 0) tensorboard_->purge_from(kept_through + 1);
  }
}

void MetricsWriter::write(int64_t step, const Metrics& metrics) {
  if (!jsonl_.is_open()) return;
  nlohmann::ordered_json record;
  record["step"] = step;
  const double wall = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (const auto& [name, value] : metrics) {
    // JSON has no NaN or infinity: a non-finite value is written as null.
    record[name] = std::isfinite(value) ? nlohmann::ordered_json(value) : nlohmann::ordered_json(nullptr);
    if (tensorboard_) tensorboard_->scalar(name, step, value, wall);
  }
  append_line(jsonl_, record.dump(), jsonl_path_);
  if (tensorboard_) tensorboard_->flush();
}

namespace {

constexpr std::string_view kPerfSummaryHeader =
    "model,precision,world_size,global_batch_size,seq_len,tokens_per_sec,samples_per_sec,"
    "tokens_per_sec_per_device,mfu,peak_memory_bytes,final_loss,first_step,last_step,train_seconds,finished_at";

// Gives the rows of an older hone's perf_summary.csv (a header that is a
// prefix of today's) the columns it lacks, empty.
void add_missing_columns(const std::string& path) {
  const std::string text = read_file(path);
  const std::string header = text.substr(0, text.find('\n'));
  if (header == kPerfSummaryHeader) return;
  HONE_CHECK(kPerfSummaryHeader.starts_with(header + ","),
             "{}: its header is not hone's (expected the columns {}); move it away to start a new one", path,
             kPerfSummaryHeader);
  const size_t missing = csv_fields(kPerfSummaryHeader).size() - csv_fields(header).size();
  std::string padded(kPerfSummaryHeader);
  for (size_t line = header.size(); line < text.size();) {
    const size_t end = std::min(text.find('\n', line + 1), text.size());
    const std::string_view row(text.data() + line + 1, end - line - 1);  // after the '\n' at `line`
    if (!row.empty()) padded += "\n" + std::string(row) + std::string(missing, ',');
    line = end;
  }
  AtomicFile file(path);
  file.write(padded + "\n");
  file.commit();
}

}  // namespace

std::string utc_timestamp() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

void append_perf_summary(const std::string& run_dir, const PerfSummary& r) {
  const std::string path = (fs::path(run_dir) / "perf_summary.csv").string();
  drop_torn_last_line(path);  // a row cut off (a full disk, a kill): not one to append to
  const bool fresh = !fs::exists(path) || fs::file_size(path) == 0;  // empty: a run killed as it made the file
  if (!fresh) add_missing_columns(path);
  std::ofstream out(path, std::ios::app);
  HONE_CHECK(out.good(), "{}: cannot open for writing", path);
  if (fresh) out << kPerfSummaryHeader << '\n';
  out << fmt::format("{},{},{},{},{},{:.1f},{:.3f},{:.1f},{:.6f},{},{:.6f},{},{},{:.3f},{}\n", csv_field(r.model),
                     r.precision, r.world_size, r.global_batch_size, r.seq_len, r.tokens_per_sec, r.samples_per_sec,
                     r.tokens_per_sec_per_device, r.mfu, r.peak_memory_bytes, r.final_loss, r.first_step,
                     r.last_step, r.train_seconds, r.finished_at);
  flush_or_fail(out, path);
}

RunConsole::RunConsole(const std::string& run_dir, bool enabled)
    : enabled_(enabled), interactive_(enabled && ::isatty(STDERR_FILENO) != 0) {
  if (!enabled) return;
  fs::create_directories(run_dir);
  log_path_ = (fs::path(run_dir) / "train.log").string();
  log_.open(log_path_, std::ios::app);
  set_fatal_error_log(log_path_);  // the error that ends the run goes into its log too
}

RunConsole::~RunConsole() { clear_progress(); }

void RunConsole::clear_progress() {
  if (progress_shown_) {
    std::fputs("\r\033[K", stderr);
    progress_shown_ = false;
  }
}

void RunConsole::line(const std::string& text) {
  if (!enabled_) return;
  clear_progress();
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
  append_line(log_, text, log_path_);
}

void RunConsole::status_line(const std::string& text) {
  if (!interactive_) return line(text);
  append_line(log_, text, log_path_);
}

void RunConsole::transient(const std::string& text) {
  if (!interactive_) return;
  std::fprintf(stderr, "\r\033[K%s", text.c_str());
  std::fflush(stderr);
  progress_shown_ = true;
}

void RunConsole::progress(int64_t step, int64_t total_steps, double loss, double tokens_per_sec,
                          double eta_seconds) {
  if (!interactive_) return;
  constexpr int kWidth = 24;
  const int filled = total_steps > 0 ? int(kWidth * std::min<int64_t>(step, total_steps) / total_steps) : 0;
  const std::string bar = std::string(size_t(filled), '=') + std::string(size_t(kWidth - filled), ' ');
  std::fprintf(stderr, "\r\033[Kstep %lld/%lld [%s] loss %.4f | %.0f tok/s | ETA %s", (long long)step,
               (long long)total_steps, bar.c_str(), loss, tokens_per_sec, format_duration(eta_seconds).c_str());
  std::fflush(stderr);
  progress_shown_ = true;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = int64_t(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

}  // namespace hone
