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
