// hone report's page: what it reads from metrics.jsonl and how it draws it.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include <fmt/format.h>

#include "hone/train/report.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

namespace fs = std::filesystem;

class RunReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir() + "hone_report_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ + "/" + name) << text; }
  std::string error_of_report() {
    try {
      render_run_report(dir_);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  std::string dir_;
};

// The points of the polyline labelled `label`, as "x,y" pairs.
std::vector<std::string> points_of(const std::string& html, const std::string& label) {
  const std::regex line("<polyline class=\"series\" data-label=\"" + label + "\"[^>]* points=\"([^\"]*)\"");
  std::smatch match;
  if (!std::regex_search(html, match, line)) return {};
  std::vector<std::string> points;
  std::istringstream in(match[1].str());
  for (std::string p; in >> p;) points.push_back(p);
  return points;
}

TEST_F(RunReportTest, DrawsEachLoggedSeriesAndSummarizesIt) {
  std::string jsonl;
  for (int step = 1; step <= 10; ++step) {
    // Step 5's loss was not finite: metrics.jsonl holds null, and the chart leaves it out.
    const std::string loss = step == 5 ? "null" : std::to_string(4.0 - 0.1 * step);
    jsonl += "{\"step\":" + std::to_string(step) + ",\"loss/train/total\":" + loss + ",\"lr\":0.001" +
             ",\"grad_norm\":1.5,\"throughput/tokens_per_sec\":1000,\"throughput/mfu\":0.25" +
             ",\"memory/allocated_mem\":0.001048576,\"memory/peak_allocated_mem\":0.003145728" +
             ",\"time/train\":0.5,\"time/token\":" + std::to_string(step * 128) + "}\n";
    if (step % 5 == 0) {
      jsonl += "{\"step\":" + std::to_string(step) +
               ",\"metrics/eval/LanguageCrossEntropy\":" + (step == 5 ? "3.25" : "3.5") +
               ",\"metrics/eval/LanguagePerplexity\":30}\n";
    }
  }
  // Resumed from a checkpoint at step 8: steps 9 and 10 logged again, with other values.
  jsonl += "{\"step\":9,\"loss/train/total\":2.75}\n{\"step\":10,\"loss/train/total\":2.5}\n";
  write("metrics.jsonl", jsonl);
  write("config.yaml", "recipe: pretrain\nnote: <b>&\n");
  write("perf_summary.csv", "model,precision\nllama_tiny,fp32\n\"llama_tiny with dim 64, n_layers 2\",bf16\n");

  const RunReport r = render_run_report(dir_);
  EXPECT_EQ(r.records, 14);
  EXPECT_EQ(r.charts, 6);                            // loss, lr, grad norm, throughput, MFU, memory
  EXPECT_EQ(points_of(r.html, "train").size(), 9u);  // 10 steps, step 5 left out, 9 and 10 once each
  EXPECT_EQ(points_of(r.html, "validation").size(), 2u);
  EXPECT_EQ(points_of(r.html, "peak allocated").size(), 10u);
  EXPECT_NE(r.html.find("<tr><th>training loss</th><td>2.5000 (step 10)</td></tr>"), std::string::npos);
  EXPECT_NE(r.html.find("<tr><th>best validation loss</th><td>3.2500 (step 5; perplexity 25.79)</td></tr>"),
            std::string::npos);
  EXPECT_NE(r.html.find("<tr><th>MFU (median)</th><td>25.0%</td></tr>"), std::string::npos);
  EXPECT_NE(r.html.find("<tr><th>peak memory</th><td>3.00 MiB (3145728 bytes)</td></tr>"), std::string::npos);
  EXPECT_NE(r.html.find(">MiB</text>"), std::string::npos);  // the memory chart's unit suits its values
  EXPECT_NE(r.html.find("<tr><th>tokens trained</th><td>1280</td></tr>"), std::string::npos);
  EXPECT_NE(r.html.find("<tr><th>training time</th><td>30m00s</td></tr>"), std::string::npos);
  // The run's files, escaped.
  EXPECT_NE(r.html.find("note: &lt;b&gt;&amp;"), std::string::npos);
  EXPECT_EQ(r.html.find("<b>&"), std::string::npos);
  EXPECT_NE(r.html.find("<tr><th>model</th><td>llama_tiny</td><td>llama_tiny with dim 64, n_layers 2</td></tr>"),
            std::string::npos)
      << r.html;
  EXPECT_NE(r.html.find("<tr><th>precision</th><td>fp32</td><td>bf16</td></tr>"), std::string::npos);
  // Self-contained: nothing loaded from elsewhere.
  EXPECT_EQ(r.html.find("<script"), std::string::npos);
  EXPECT_EQ(r.html.find("http://"), r.html.find("http://www.w3.org/2000/svg"));
}

// A nearly flat series (a run's peak memory) still gets ticks that differ.
TEST_F(RunReportTest, TickLabelsOfANearlyFlatSeriesDiffer) {
  std::string jsonl;
  for (int step = 1; step <= 20; ++step) {
    jsonl += "{\"step\":" + std::to_string(step) + ",\"memory/peak_allocated_mem\":" +
             fmt::format("{}", (2879000 + 40 * step) / 1e9) + "}\n";  // gigabytes
  }
  write("metrics.jsonl", jsonl);
  const std::string html = render_run_report(dir_).html;
  const std::regex tick(R"(<text x="[0-9.]+" y="[0-9.]+" text-anchor="end">([^<]*)</text>)");
  std::vector<std::string> labels;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), tick); it != std::sregex_iterator(); ++it) {
    labels.push_back((*it)[1].str());
  }
  ASSERT_GE(labels.size(), 3u) << html;
  for (size_t i = 1; i < labels.size(); ++i) EXPECT_NE(labels[i], labels[i - 1]) << html;
  EXPECT_EQ(labels.front().find('e'), std::string::npos) << labels.front();
}

TEST_F(RunReportTest, DrawsOnlyTheChartsItHasDataFor) {
  write("metrics.jsonl", "{\"step\":1,\"loss/train/total\":3.0}\n");
  const RunReport r = render_run_report(dir_);
  EXPECT_EQ(r.charts, 1);
  EXPECT_EQ(points_of(r.html, "train").size(), 1u);
  EXPECT_EQ(r.html.find("validation"), std::string::npos);
  write("metrics.jsonl", "{\"step\":1}\n");  // records without a metric: no chart, no step range
  const RunReport bare = render_run_report(dir_);
  EXPECT_EQ(bare.records, 1);
  EXPECT_EQ(bare.charts, 0);
  EXPECT_EQ(bare.html.find("steps logged"), std::string::npos);
}

// A lora_dpo run's metrics: its loss (train and validation), rewards and how
// often the chosen answer wins.
TEST_F(RunReportTest, DrawsDposRewardsAndHowOftenTheChosenAnswerWins) {
  write("metrics.jsonl",
        "{\"step\":1,\"loss/train/total\":0.69,\"rewards/chosen\":0.0,\"rewards/rejected\":0.0,"
        "\"rewards/accuracies\":0.0,\"rewards/margins\":0.0}\n"
        "{\"step\":2,\"loss/train/total\":0.5,\"rewards/chosen\":0.2,\"rewards/rejected\":-0.1,"
        "\"rewards/accuracies\":0.75,\"rewards/margins\":0.3}\n"
        "{\"step\":2,\"loss/eval/total\":0.45,\"eval/rewards/accuracies\":0.875,\"eval/rewards/margins\":0.4}\n");
  const RunReport r = render_run_report(dir_);
  EXPECT_EQ(r.charts, 3);  // loss, rewards, chosen preferred
  EXPECT_EQ(points_of(r.html, "chosen").size(), 2u);
  EXPECT_EQ(points_of(r.html, "validation margin").size(), 1u);
  EXPECT_NE(r.html.find("<tr><th>last validation loss</th><td>0.4500 (step 2)</td></tr>"), std::string::npos);
  EXPECT_NE(r.html.find("<tr><th>chosen preferred (last validation)</th><td>87.5% (step 2)</td></tr>"),
            std::string::npos);
}

// A long run's chart keeps every spike, however many steps share a point.
TEST_F(RunReportTest, ALongSeriesKeepsItsSpikes) {
  std::string jsonl;
  for (int step = 1; step <= 20000; ++step) {
    const double loss = step == 12345 ? 9.0 : step == 777 ? 0.5 : 3.0;
    jsonl += fmt::format("{{\"step\":{},\"loss/train/total\":{}}}\n", step, loss);
  }
  write("metrics.jsonl", jsonl);
  const std::vector<std::string> points = points_of(render_run_report(dir_).html, "train");
  EXPECT_LE(points.size(), 1501u);
  // The y of each point: the plot's top (the spike's 9.0) and bottom (0.5) are there.
  std::vector<double> ys;
  for (const std::string& p : points) ys.push_back(std::stod(p.substr(p.find(',') + 1)));
  const auto [low, high] = std::minmax_element(ys.begin(), ys.end());
  EXPECT_LT(*low, 40.0);    // 9.0 near the top (kTop = 24)
  EXPECT_GT(*high, 200.0);  // 0.5 near the bottom
  EXPECT_EQ(std::count(ys.begin(), ys.end(), *low), 1);
  EXPECT_EQ(points.back().substr(0, points.back().find(',')), "704.0");  // the last step, at the plot's right edge
}

// Several runs on one page: a column and a color each, validation dashed,
// and the config keys that differ.
TEST_F(RunReportTest, ComparesSeveralRuns) {
  for (const char* run : {"a", "b"}) fs::create_directories(dir_ + "/" + run);
  write("a/metrics.jsonl",
        "{\"step\":1,\"loss/train/total\":4.0}\n{\"step\":2,\"loss/train/total\":3.0,"
        "\"metrics/eval/LanguageCrossEntropy\":3.5}\n");
  write("b/metrics.jsonl", "{\"step\":1,\"loss/train/total\":4.5}\n{\"step\":2,\"loss/train/total\":2.0}\n"
                          "{\"step\":3,\"loss/train/total\":1.5,\"lr\":0.001}\n");
  write("a/config.yaml", "seed: 1\noptimizer:\n  lr: 0.001\n  betas: [0.9, 0.95]\nnote: same\n");
  write("b/config.yaml", "seed: 1\noptimizer:\n  lr: 0.002\n  betas: [0.9, 0.95]\nnote: same\nextra: <x>\n");
  const RunReport r = render_runs_report({dir_ + "/a", dir_ + "/b"});
  EXPECT_EQ(r.records, 5);
  EXPECT_EQ(r.charts, 2);  // loss; the learning rate of b alone
  EXPECT_EQ(points_of(r.html, "a: train").size(), 2u);
  EXPECT_EQ(points_of(r.html, "a: validation").size(), 1u);
  EXPECT_EQ(points_of(r.html, "b: train").size(), 3u);
  EXPECT_EQ(points_of(r.html, "b: lr").size(), 1u);
  EXPECT_NE(r.html.find(R"(data-label="a: validation" fill="none" stroke="#1f77b4" stroke-width="1.5" stroke-dasharray)"),
            std::string::npos)
      << r.html;
  EXPECT_NE(r.html.find(R"(data-label="b: train" fill="none" stroke="#d62728" stroke-width="1.5" points)"),
            std::string::npos);
  EXPECT_NE(r.html.find("<tr><th></th><th>a</th><th>b</th></tr><tr><th>steps logged</th><td>1 to 2</td><td>1 to 3</td>"),
            std::string::npos)
      << r.html;
  EXPECT_NE(r.html.find("<tr><th>best validation loss</th><td>3.5000 (step 2; perplexity 33.12)</td><td></td></tr>"),
            std::string::npos);
  // Only the differing keys, escaped; a key one run lacks is empty there.
  EXPECT_NE(r.html.find("<tr><th>optimizer.lr</th><td>0.001</td><td>0.002</td></tr>"), std::string::npos) << r.html;
  EXPECT_NE(r.html.find("<tr><th>extra</th><td></td><td>&lt;x&gt;</td></tr>"), std::string::npos);
  EXPECT_EQ(r.html.find("<th>seed</th>"), std::string::npos);
  EXPECT_EQ(r.html.find("<th>optimizer.betas</th>"), std::string::npos);
  EXPECT_NE(r.html.find("<h2>config.yaml of b</h2>"), std::string::npos);
  // Folders of the same name are told apart by their paths.
  fs::create_directories(dir_ + "/c/a");
  write("c/a/metrics.jsonl", "{\"step\":1,\"loss/train/total\":4.0}\n");
  fs::copy_file(dir_ + "/a/config.yaml", dir_ + "/c/a/config.yaml");
  const RunReport same = render_runs_report({dir_ + "/a", dir_ + "/c/a"});
  EXPECT_EQ(points_of(same.html, dir_ + "/c/a: train").size(), 1u) << same.html;
  EXPECT_NE(same.html.find("<p>The runs' config.yaml files set the same values.</p>"), std::string::npos);
  // One folder named twice (here by two spellings) would draw one run twice.
  try {
    render_runs_report({dir_ + "/a", dir_ + "/c/../a/"});
    ADD_FAILURE() << "the same folder twice was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), dir_ + "/a and " + dir_ + "/c/../a/ are the same run folder: name it once");
  }
}

TEST_F(RunReportTest, SkipsALastLineCutShortAndNamesAnyOtherBadLine) {
  write("metrics.jsonl", "{\"step\":1,\"lr\":0.1}\n{\"step\":2,\"lr\":0.2}\n{\"step\":3,\"lr\":0.");
  const RunReport r = render_run_report(dir_);
  EXPECT_EQ(r.records, 2);
  EXPECT_NE(r.html.find("cut short"), std::string::npos);

  const std::string path = dir_ + "/metrics.jsonl";
  write("metrics.jsonl", "{\"step\":1,\"lr\":0.1}\n{\"step\":2,\"lr\":0.\n{\"step\":3,\"lr\":0.3}\n");
  EXPECT_EQ(error_of_report(), path + ": line 2: expected a JSON object");
  write("metrics.jsonl", "{\"lr\":0.1}\n");
  EXPECT_EQ(error_of_report(), path + ": line 1: no integer \"step\"");
  write("metrics.jsonl", "\n{\"step\":1,\"lr\":\"fast\"}\n");
  EXPECT_EQ(error_of_report(), path + ": line 2: \"lr\" is not a number");
  write("metrics.jsonl", "");
  EXPECT_EQ(error_of_report(), path + ": no metrics yet (the run logs every log_every_n_steps steps)");
  fs::remove(path);
  EXPECT_EQ(error_of_report(), path + ": cannot read it (is this a hone run folder?)");
  fs::remove_all(dir_);
  EXPECT_EQ(error_of_report(), dir_ + ": no such run folder");
}

}  // namespace
}  // namespace hone::test
