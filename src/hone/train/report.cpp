#include "hone/train/report.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

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
#include "hone/config/config.hpp"
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
  size_t color = 0;                               // into kColors
  size_t dash = 0;                                // into kDashes
};

// A legend entry: text in its color, after a short stroke of its dash pattern.
struct LegendEntry {
  std::string text;
  size_t color = 0;
  size_t dash = 0;
};

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
constexpr size_t kGray = 7;
constexpr const char* kDashes[] = {"", "6,4", "2,3"};  // solid, dashed, dotted

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

// A polyline keeps at most about this many points: of each run of k steps, its
// lowest and highest value (in step order), so that a spike stays in the chart.
constexpr size_t kMaxPoints = 1500;

std::vector<std::pair<double, double>> thinned(const std::vector<std::pair<double, double>>& points) {
  const size_t stride = (points.size() + kMaxPoints / 2 - 1) / (kMaxPoints / 2);
  if (stride <= 1) return points;
  std::vector<std::pair<double, double>> out;
  for (size_t from = 0; from < points.size(); from += stride) {
    const auto begin = points.begin() + ptrdiff_t(from);
    const auto end = points.begin() + ptrdiff_t(std::min(from + stride, points.size()));
    const auto [low, high] = std::minmax_element(begin, end, [](const auto& a, const auto& b) { return a.second < b.second; });
    out.push_back(*std::min(low, high));
    if (low != high) out.push_back(*std::max(low, high));
  }
  if (out.back() != points.back()) out.push_back(points.back());
  return out;
}

std::string dash_attribute(size_t dash) {
  const char* pattern = kDashes[dash % std::size(kDashes)];
  return *pattern ? fmt::format(R"( stroke-dasharray="{}")", pattern) : "";
}

std::string svg_chart(const std::string& unit, const std::vector<Line>& lines, const std::vector<LegendEntry>& legend) {
  constexpr double kWidth = 720, kHeight = 262, kLeft = 72, kRight = 16, kTop = 24, kBottom = 36;
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
  for (const Line& l : lines) {
    const char* color = kColors[l.color % std::size(kColors)];
    std::string coordinates;
    for (const auto& [x, y] : thinned(l.points))
      coordinates += fmt::format("{}{:.1f},{:.1f}", coordinates.empty() ? "" : " ", px(x), py(y));
    svg += fmt::format(
        R"(<polyline class="series" data-label="{}" fill="none" stroke="{}" stroke-width="1.5"{} points="{}"/>)",
        escape(l.label), color, dash_attribute(l.dash), coordinates);
    // Sparse series (validation) get a marker per point.
    if (l.points.size() <= 60) {
      for (const auto& [x, y] : l.points)
        svg += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="2.5" fill="{}"/>)", px(x), py(y), color);
    }
  }
  // The legend above the plot, right-aligned; a dashed or dotted entry leads with its stroke.
  double legend_x = kLeft + plot_w;
  for (size_t i = legend.size(); i-- > 0;) {
    const LegendEntry& e = legend[i];
    const char* color = kColors[e.color % std::size(kColors)];
    svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="end" fill="{}">{}</text>)", legend_x, kTop - 8,
                       color, escape(e.text));
    legend_x -= 7.0 * double(e.text.size()) + 4;
    if (e.dash > 0) {
      svg += fmt::format(R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}"{}/>)", legend_x - 20,
                         kTop - 12, legend_x, kTop - 12, color, dash_attribute(e.dash));
      legend_x -= 24;
    }
    legend_x -= 12;
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

using SummaryRows = std::vector<std::pair<std::string, std::string>>;  // (name, value)

SummaryRows summary_rows(const Table& t) {
  SummaryRows rows;
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
  return rows;
}

// One column of values per run (a run without a row's value shows none), rows
// in the order they first appear.
std::string summary_table(const std::vector<SummaryRows>& runs, const std::vector<std::string>& labels) {
  std::vector<std::string> names;
  std::map<std::string, std::vector<std::string>> values;
  for (size_t r = 0; r < runs.size(); ++r) {
    for (const auto& [name, value] : runs[r]) {
      auto& row = values[name];
      if (row.empty()) names.push_back(name), row.resize(runs.size());
      row[r] = value;
    }
  }
  std::string html = "<table>";
  if (runs.size() > 1) {
    html += "<tr><th></th>";
    for (const std::string& label : labels) html += "<th>" + escape(label) + "</th>";
    html += "</tr>";
  }
  for (const std::string& name : names) {
    html += "<tr><th>" + name + "</th>";
    for (const std::string& value : values[name]) html += "<td>" + escape(value) + "</td>";
    html += "</tr>";
  }
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

namespace {

struct Run {
  std::string dir, label;
  LoggedMetrics metrics;
  std::string config, perf_summary;  // the files' text, "" where absent
};

// Each run's label: its folder's name, or the path as given where two names
// are the same.
std::vector<std::string> run_labels(const std::vector<std::string>& dirs) {
  std::vector<std::string> names;
  for (const std::string& dir : dirs) {
    std::filesystem::path path = std::filesystem::path(dir).lexically_normal();
    if (path.filename().empty()) path = path.parent_path();  // "runs/a/"
    const std::filesystem::path name = path.filename();
    names.push_back(name.empty() || name == "." || name == ".." ? dir : name.string());
  }
  std::vector<std::string> labels = names;
  for (size_t i = 0; i < names.size(); ++i) {
    if (std::count(names.begin(), names.end(), names[i]) > 1) labels[i] = dirs[i];
  }
  return labels;
}

// The config keys whose values differ between the runs, a row each.
std::string config_differences(const std::vector<Run>& runs) {
  std::vector<std::map<std::string, std::string>> leaves(runs.size());
  std::vector<std::string> keys;
  for (size_t r = 0; r < runs.size(); ++r) {
    if (runs[r].config.empty()) continue;
    const Config config = Config::from_yaml(runs[r].config, runs[r].dir + "/config.yaml");
    for (const auto& [key, value] : config_leaves(config.tree())) {
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
      leaves[r][key] = value->is_string() ? value->get<std::string>() : value->dump();
    }
  }
  std::string rows;
  for (const std::string& key : keys) {
    std::vector<std::string> values;
    for (const auto& run : leaves) values.push_back(run.contains(key) ? run.at(key) : "");
    if (std::all_of(values.begin(), values.end(), [&](const std::string& v) { return v == values[0]; })) continue;
    rows += "<tr><th>" + escape(key) + "</th>";
    for (const std::string& value : values) rows += "<td>" + escape(value) + "</td>";
    rows += "</tr>";
  }
  if (rows.empty()) return "<p>The runs' config.yaml files set the same values.</p>";
  std::string html = "<table><tr><th></th>";
  for (const Run& run : runs) html += "<th>" + escape(run.label) + "</th>";
  return html + "</tr>" + rows + "</table>";
}

}  // namespace

void check_report_output(const std::vector<std::string>& run_dirs, const std::string& output) {
  if (!std::filesystem::exists(output)) return;
  // Any run's files, the reported runs' or another's: a page in their place would lose them.
  const std::string name = std::filesystem::path(output).filename().string();
  for (const char* own : {"metrics.jsonl", "config.yaml", "perf_summary.csv", "train.log"}) {
    HONE_CHECK(name != own, "{}: a run's {}, which the page would replace: write the page elsewhere (-o FILE; by "
               "default {})", output, own, (std::filesystem::path(run_dirs.front()) / "report.html").string());
  }
}

RunReport render_run_report(const std::string& run_dir) { return render_runs_report({run_dir}); }

RunReport render_runs_report(const std::vector<std::string>& run_dirs) {
  HONE_CHECK(!run_dirs.empty(), "no run folder given");
  const std::vector<std::string> labels = run_labels(run_dirs);
  std::vector<Run> runs;
  RunReport report;
  for (size_t r = 0; r < run_dirs.size(); ++r) {
    const std::string& dir = run_dirs[r];
    HONE_CHECK(std::filesystem::is_directory(dir), "{}: no such run folder", dir);
    for (size_t earlier = 0; earlier < r; ++earlier) {
      HONE_CHECK(!std::filesystem::equivalent(run_dirs[earlier], dir), "{} and {} are the same run folder: name it once",
                 run_dirs[earlier], dir);
    }
    const std::filesystem::path path(dir);
    runs.push_back({dir, labels[r], read_metrics((path / "metrics.jsonl").string()),
                    read_if_present(path / "config.yaml"), read_if_present(path / "perf_summary.csv")});
    report.records += runs.back().metrics.records;
  }
  const bool several = runs.size() > 1;

  std::string& html = report.html;
  html = fmt::format(R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>hone report: {}</title>
<style>
body {{ font-family: sans-serif; max-width: 760px; margin: 2em auto; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0; }}
th, td {{ padding: 2px 12px 2px 0; text-align: left; vertical-align: top; }}
svg text {{ font-size: 11px; font-family: sans-serif; }}
pre {{ background: #f6f6f6; padding: 0.5em; overflow-x: auto; }}
</style></head><body>
<h1>hone report</h1>
)",
                     escape(fmt::format("{}", fmt::join(labels, ", "))));
  if (!several) {
    html += fmt::format("<p>Run folder <code>{}</code>: {} records of metrics.jsonl.</p>\n", escape(runs[0].dir),
                        runs[0].metrics.records);
  } else {
    html += "<p>Runs compared, each in its color (training solid, a chart's other series dashed or dotted as its "
            "legend shows):</p>\n<ul>\n";
    for (size_t r = 0; r < runs.size(); ++r) {
      html += fmt::format("<li><span style=\"color:{}\">{}</span>: <code>{}</code>, {} records of metrics.jsonl</li>\n",
                          kColors[r % std::size(kColors)], escape(runs[r].label), escape(runs[r].dir),
                          runs[r].metrics.records);
    }
    html += "</ul>\n";
  }
  for (const Run& run : runs) {
    if (run.metrics.last_line_cut) {
      html += fmt::format(
          "<p>The last line of {}metrics.jsonl was cut short (the run stopped while writing it) and is left out.</p>\n",
          several ? escape(run.label) + "'s " : "");
    }
  }
  std::vector<SummaryRows> summaries;
  for (const Run& run : runs) summaries.push_back(summary_rows(run.metrics.values));
  html += "<h2>Summary</h2>\n" + summary_table(summaries, labels) + "\n";

  for (const Chart& chart : charts()) {
    // One run: a color per series. Several: a color per run, and a dash
    // pattern per series (training's solid, validation's dashed).
    std::vector<Line> lines;
    std::vector<LegendEntry> legend;
    std::vector<bool> series_drawn(chart.series.size()), run_drawn(runs.size());
    for (size_t r = 0; r < runs.size(); ++r) {
      for (size_t s = 0; s < chart.series.size(); ++s) {
        const auto& [metric, label] = chart.series[s];
        const auto* steps = steps_of(runs[r].metrics.values, metric);
        if (steps == nullptr) continue;
        Line line{several ? runs[r].label + ": " + label : label, {}, several ? r : s, several ? s : 0};
        for (const auto& [step, value] : *steps) {
          if (std::isfinite(value)) line.points.emplace_back(double(step), value * chart.scale);
        }
        if (line.points.empty()) continue;
        if (!several) legend.push_back({label, s, 0});
        series_drawn[s] = run_drawn[r] = true;
        lines.push_back(std::move(line));
      }
    }
    if (lines.empty()) continue;
    if (several) {
      for (size_t r = 0; r < runs.size(); ++r)
        if (run_drawn[r]) legend.push_back({runs[r].label, r, 0});
      for (size_t s = 1; s < chart.series.size(); ++s)
        if (series_drawn[s]) legend.push_back({chart.series[s].second, kGray, s});
    }
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
    html += fmt::format("<h2>{}</h2>\n{}\n", chart.title, svg_chart(unit, lines, legend));
    ++report.charts;
  }
  if (several) html += "<h2>Config differences</h2>\n" + config_differences(runs) + "\n";
  for (const Run& run : runs) {
    const std::string of = several ? " of " + escape(run.label) : "";
    if (!run.perf_summary.empty()) html += "<h2>perf_summary.csv" + of + "</h2>\n" + csv_table(run.perf_summary) + "\n";
  }
  for (const Run& run : runs) {
    const std::string of = several ? " of " + escape(run.label) : "";
    if (!run.config.empty()) html += "<h2>config.yaml" + of + "</h2>\n<pre>" + escape(run.config) + "</pre>\n";
  }
  html += "</body></html>\n";
  return report;
}

}  // namespace hone
