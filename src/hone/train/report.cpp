#include "hone/train/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

#include "hone/core/error.hpp"
#include "hone/core/files.hpp"
#include "hone/core/text.hpp"
#include "hone/train/metrics.hpp"

namespace hone {

namespace {

// metric name -> step -> value (a later record of a step replaces an earlier one).
using Table = std::map<std::string, std::map<int64_t, double>>;

struct LoggedMetrics {
  Table values;
  int64_t records = 0;
  bool last_line_cut = false;
};

LoggedMetrics read_metrics(const std::string& path) {
  HONE_CHECK(std::filesystem::is_regular_file(path), "{}: cannot read it (is this a hone run folder?)", path);
  const std::string text = read_file(path);
  LoggedMetrics m;
  size_t begin = 0;
  for (int64_t line = 1; begin < text.size(); ++line) {
    const size_t end = std::min(text.find('\n', begin), text.size());
    const std::string_view record(text.data() + begin, end - begin);
    const bool last = end == text.size();  // no newline after it: the writer may have been stopped mid-line
    begin = end + 1;
    if (record.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    nlohmann::json j = nlohmann::json::parse(record, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() && last) {
      m.last_line_cut = true;
      break;
    }
    HONE_CHECK(j.is_object(), "{}: line {}: expected a JSON object", path, line);
    HONE_CHECK(j.contains("step") && j["step"].is_number_integer(), "{}: line {}: no integer \"step\"", path, line);
    const int64_t step = j["step"].get<int64_t>();
    for (const auto& [key, value] : j.items()) {
      // null is how a non-finite value (a skipped step's loss) is written.
      if (key == "step" || value.is_null()) continue;
      HONE_CHECK(value.is_number(), "{}: line {}: \"{}\" is not a number", path, line, key);
      m.values[key][step] = value.get<double>();
    }
    ++m.records;
  }
  HONE_CHECK(m.records > 0, "{}: no metrics yet (the run logs every log_every_n_steps steps)", path);
  return m;
}

// A file of the run folder that may be absent ("" then).
std::string read_if_present(const std::filesystem::path& path) {
  return std::filesystem::exists(path) ? read_file(path.string()) : "";
}

std::string escape(std::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// ---- charts ----

struct Line {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (step, value), in step order
};

struct Chart {
  const char* title;
  const char* unit;                                         // "bytes": shown in MiB or GiB, whichever suits the values
  double scale;                                             // applied to the logged values
  std::vector<std::pair<const char*, const char*>> series;  // (metric, label)
};

const std::vector<Chart>& charts() {
  static const std::vector<Chart> list{
      {"Loss",
       "",
       1.0,
       {{"loss/train/total", "train"},
        {"metrics/eval/LanguageCrossEntropy", "validation"},
        {"loss/eval/total", "validation"}}},  // DPO's
      // DPO: how far the chosen answers' rewards stand above the rejected ones'.
      {"Rewards",
       "",
       1.0,
       {{"rewards/chosen", "chosen"}, {"rewards/rejected", "rejected"}, {"eval/rewards/margins", "validation margin"}}},
      {"Chosen preferred",
       "%",
       100.0,
       {{"rewards/accuracies", "train"}, {"eval/rewards/accuracies", "validation"}}},
      {"Learning rate", "", 1.0, {{"lr", "lr"}}},
      {"Gradient norm", "", 1.0, {{"grad_norm", "global norm"}}},
      {"Throughput", "tokens/s", 1.0, {{"throughput/tokens_per_sec", "tokens/s"}}},
      {"MFU", "%", 100.0, {{"throughput/mfu", "MFU"}}},
      {"Memory",
       "bytes",
       1e9,  // logged in gigabytes, as Composer's
       {{"memory/peak_allocated_mem", "peak allocated"}, {"memory/allocated_mem", "allocated"}}},
  };
  return list;
}

// Tick spacing of 1, 2 or 5 times a power of ten, giving about `count` ticks over `range`.
double nice_step(double range, int count) {
  const double raw = range / count;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double f : {1.0, 2.0, 5.0}) {
    if (raw <= f * power) return f * power;
  }
  return 10.0 * power;
}

// Whole numbers as such (120000, not 1.2e+05); otherwise as many decimals as the
// step has, so that neighbouring ticks differ (2.7460, 2.7465 MiB).
std::string tick_label(double value, double step) {
  if (std::abs(value) >= 1e12) return fmt::format("{:.4g}", value);
  int decimals = 0;
  for (double scaled = step; decimals < 12 && std::abs(scaled - std::round(scaled)) > 1e-6 * scaled; scaled *= 10) {
    ++decimals;
  }
  return fmt::format("{:.{}f}", value, decimals);
}

// A polyline keeps at most this many points: every k-th step (and the last).
constexpr size_t kMaxPoints = 1500;

std::string svg_chart(const std::string& unit, const std::vector<Line>& lines) {
  constexpr double kWidth = 720, kHeight = 262, kLeft = 72, kRight = 16, kTop = 24, kBottom = 36;
  static const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd"};
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const Line& l : lines) {
    for (const auto& [x, y] : l.points) {
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  }
  if (x1 == x0) x0 -= 1, x1 += 1;
  if (y1 == y0) {
    const double pad = y0 == 0 ? 1.0 : std::abs(y0) * 0.1;
    y0 -= pad, y1 += pad;
  }
  const double y_pad = (y1 - y0) * 0.05;
  y0 -= y_pad, y1 += y_pad;
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  const auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * plot_w; };
  const auto py = [&](double y) { return kTop + (y1 - y) / (y1 - y0) * plot_h; };

  std::string svg =
      fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" role="img">)", kWidth, kHeight);
  svg += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#999"/>)", kLeft, kTop, plot_w,
                     plot_h);
  const double y_step = nice_step(y1 - y0, 5);
  for (double t = std::ceil(y0 / y_step) * y_step; t <= y1; t += y_step) {
    const double y = py(t);
    svg += fmt::format(R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="#eee"/>)", kLeft, y,
                       kLeft + plot_w, y);
    svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="end">{}</text>)", kLeft - 6, y + 4,
                       tick_label(std::abs(t) < y_step * 1e-6 ? 0.0 : t, y_step));
  }
  const double x_step = std::max(1.0, std::round(nice_step(x1 - x0, 6)));
  for (double t = std::ceil(x0 / x_step) * x_step; t <= x1; t += x_step) {
    svg +=
        fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="middle">{:.0f}</text>)", px(t), kTop + plot_h + 16, t);
  }
  svg +=
      fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="middle">step</text>)", kLeft + plot_w / 2, kHeight - 4);
  if (!unit.empty()) {
    svg +=
        fmt::format(R"svg(<text x="12" y="{:.1f}" text-anchor="middle" transform="rotate(-90 12 {:.1f})">{}</text>)svg",
                    kTop + plot_h / 2, kTop + plot_h / 2, escape(unit));
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    const Line& l = lines[i];
    const char* color = kColors[i % std::size(kColors)];
    const size_t stride = (l.points.size() + kMaxPoints - 1) / kMaxPoints;
    std::string coordinates;
    for (size_t p = 0; p < l.points.size(); ++p) {
      if (p % stride != 0 && p + 1 != l.points.size()) continue;
      coordinates +=
          fmt::format("{}{:.1f},{:.1f}", coordinates.empty() ? "" : " ", px(l.points[p].first), py(l.points[p].second));
    }
    svg += fmt::format(
        R"(<polyline class="series" data-label="{}" fill="none" stroke="{}" stroke-width="1.5" points="{}"/>)",
        escape(l.label), color, coordinates);
    // Sparse series (validation) get a marker per point.
    if (l.points.size() <= 60) {
      for (const auto& [x, y] : l.points)
        svg += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="2.5" fill="{}"/>)", px(x), py(y), color);
    }
  }
  // The legend above the plot, right-aligned: one colored label per line.
  double legend_x = kLeft + plot_w;
  for (size_t i = lines.size(); i-- > 0;) {
    svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="end" fill="{}">{}</text>)", legend_x, kTop - 8,
                       kColors[i % std::size(kColors)], escape(lines[i].label));
    legend_x -= 7.0 * double(lines[i].label.size()) + 16;
  }
  return svg + "</svg>";
}

// Bytes in MiB below a GiB, else in GiB: the unit's size and name.
std::pair<double, const char*> byte_unit(double most) {
  return most >= double(1 << 30) ? std::pair{double(1 << 30), "GiB"} : std::pair{double(1 << 20), "MiB"};
}

// ---- summary ----

// A metric's values by step, or null when it was never logged (a logged
// metric has at least one value).
const std::map<int64_t, double>* steps_of(const Table& t, const std::string& metric) {
  auto found = t.find(metric);
  return found == t.end() ? nullptr : &found->second;
}

bool by_value(const std::pair<const int64_t, double>& a, const std::pair<const int64_t, double>& b) {
  return a.second < b.second;
}

std::optional<std::pair<int64_t, double>> last_of(const Table& t, const std::string& metric) {
  const auto* steps = steps_of(t, metric);
  if (steps == nullptr) return std::nullopt;
  return *steps->rbegin();
}

std::optional<std::pair<int64_t, double>> lowest_of(const Table& t, const std::string& metric) {
  const auto* steps = steps_of(t, metric);
  if (steps == nullptr) return std::nullopt;
  return *std::min_element(steps->begin(), steps->end(), by_value);
}

std::optional<double> highest_of(const Table& t, const std::string& metric) {
  const auto* steps = steps_of(t, metric);
  if (steps == nullptr) return std::nullopt;
  return std::max_element(steps->begin(), steps->end(), by_value)->second;
}

std::optional<double> median_of(const Table& t, const std::string& metric) {
  const auto* steps = steps_of(t, metric);
  if (steps == nullptr) return std::nullopt;
  std::vector<double> v;
  for (const auto& [step, value] : *steps) v.push_back(value);
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string summary_table(const Table& t) {
  std::vector<std::pair<std::string, std::string>> rows;
  int64_t first = INT64_MAX, last = INT64_MIN;
  for (const auto& [metric, steps] : t) {
    first = std::min(first, steps.begin()->first);
    last = std::max(last, steps.rbegin()->first);
  }
  if (first <= last) rows.emplace_back("steps logged", fmt::format("{} to {}", first, last));
  if (auto v = last_of(t, "loss/train/total"))
    rows.emplace_back("training loss", fmt::format("{:.4f} (step {})", v->second, v->first));
  if (auto v = lowest_of(t, "metrics/eval/LanguageCrossEntropy")) {
    rows.emplace_back("best validation loss",
                      fmt::format("{:.4f} (step {}; perplexity {:.2f})", v->second, v->first, std::exp(v->second)));
  }
  if (auto v = last_of(t, "metrics/eval/LanguageCrossEntropy")) {
    rows.emplace_back("last validation loss", fmt::format("{:.4f} (step {})", v->second, v->first));
  }
  if (auto v = last_of(t, "loss/eval/total")) {
    rows.emplace_back("last validation loss", fmt::format("{:.4f} (step {})", v->second, v->first));
  }
  if (auto v = last_of(t, "eval/rewards/accuracies")) {
    rows.emplace_back("chosen preferred (last validation)", fmt::format("{:.1f}% (step {})", v->second * 100, v->first));
  }
  if (auto v = median_of(t, "throughput/tokens_per_sec"))
    rows.emplace_back("tokens/s (median)", fmt::format("{:.1f}", *v));
  if (auto v = median_of(t, "throughput/mfu")) rows.emplace_back("MFU (median)", fmt::format("{:.1f}%", *v * 100));
  if (auto v = highest_of(t, "memory/peak_allocated_mem")) {
    const double bytes = *v * 1e9;  // logged in gigabytes, as Composer's
    const auto [size, name] = byte_unit(bytes);
    rows.emplace_back("peak memory", fmt::format("{:.2f} {} ({:.0f} bytes)", bytes / size, name, bytes));
  }
  if (auto v = last_of(t, "time/token")) rows.emplace_back("tokens trained", fmt::format("{:.0f}", v->second));
  if (auto v = last_of(t, "time/train")) rows.emplace_back("training time", format_duration(v->second * 3600.0));
  std::string html = "<table>";
  for (const auto& [name, value] : rows) html += fmt::format("<tr><th>{}</th><td>{}</td></tr>", name, escape(value));
  return html + "</table>";
}

// perf_summary.csv (a row per run or resumed run) as a table with its columns
// as rows, so that its many fields fit the page.
std::string csv_table(const std::string& csv) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream lines(csv);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty()) rows.push_back(csv_fields(line));
  }
  std::string html = "<table>";
  for (size_t column = 0; !rows.empty() && column < rows[0].size(); ++column) {
    html += "<tr><th>" + escape(rows[0][column]) + "</th>";
    for (size_t r = 1; r < rows.size(); ++r)
      html += "<td>" + escape(column < rows[r].size() ? rows[r][column] : "") + "</td>";
    html += "</tr>";
  }
  return html + "</table>";
}

}  // namespace

RunReport render_run_report(const std::string& run_dir) {
  HONE_CHECK(std::filesystem::is_directory(run_dir), "{}: no such run folder", run_dir);
  const std::filesystem::path dir(run_dir);
  const LoggedMetrics m = read_metrics((dir / "metrics.jsonl").string());

  RunReport report;
  report.records = m.records;
  std::string& html = report.html;
  html = fmt::format(R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>hone report: {0}</title>
<style>
body {{ font-family: sans-serif; max-width: 760px; margin: 2em auto; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0; }}
th, td {{ padding: 2px 12px 2px 0; text-align: left; vertical-align: top; }}
svg text {{ font-size: 11px; font-family: sans-serif; }}
pre {{ background: #f6f6f6; padding: 0.5em; overflow-x: auto; }}
</style></head><body>
<h1>hone report</h1>
<p>Run folder <code>{0}</code>: {1} records of metrics.jsonl.</p>
)",
                     escape(run_dir), m.records);
  if (m.last_line_cut)
    html += "<p>The last line of metrics.jsonl was cut short (the run stopped while writing it) and is left out.</p>\n";
  html += "<h2>Summary</h2>\n" + summary_table(m.values) + "\n";
  for (const Chart& chart : charts()) {
    std::vector<Line> lines;
    for (const auto& [metric, label] : chart.series) {
      const auto* steps = steps_of(m.values, metric);
      if (steps == nullptr) continue;
      Line line{label, {}};
      for (const auto& [step, value] : *steps) {
        if (std::isfinite(value)) line.points.emplace_back(double(step), value * chart.scale);
      }
      if (!line.points.empty()) lines.push_back(std::move(line));
    }
    if (lines.empty()) continue;
    std::string unit = chart.unit;
    if (unit == "bytes") {
      double most = 0;
      for (const Line& l : lines)
        for (const auto& point : l.points) most = std::max(most, point.second);
      const auto [size, name] = byte_unit(most);
      unit = name;
      for (Line& l : lines)
        for (auto& point : l.points) point.second /= size;
    }
    html += fmt::format("<h2>{}</h2>\n{}\n", chart.title, svg_chart(unit, lines));
    ++report.charts;
  }
  if (const std::string csv = read_if_present(dir / "perf_summary.csv"); !csv.empty()) {
    html += "<h2>perf_summary.csv</h2>\n" + csv_table(csv) + "\n";
  }
  if (const std::string config = read_if_present(dir / "config.yaml"); !config.empty()) {
    html += "<h2>config.yaml</h2>\n<pre>" + escape(config) + "</pre>\n";
  }
  html += "</body></html>\n";
  return report;
}

}  // namespace hone
