// Whole training runs through the `hone` binary: exact resume, checkpoints that
// survive SIGKILL at any moment, graceful SIGINT, and non-finite losses.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "hone/core/rng.hpp"
#include "hone/data/formats/megatron.hpp"
#include "hone/io/safetensors.hpp"
#include "hone/io/checkpoint.hpp"
#include "run_hone.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

namespace fs = std::filesystem;

class TrainingRun : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::TempDir() + "hone_run_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // A small pretraining config on mock data; `extra` lines are appended.
  std::string config(const std::string& run, int64_t steps, const std::string& extra = "") {
    const std::string path = root_ + "/" + run + ".yaml";
    std::ofstream(path) << "recipe: pretrain\noutput_dir: " << root_ << "/" << run << "\nthreads: 1\n"
                        << "model: {name: llama_tiny}\n"
                        << "dataset: {type: mock, seq_len: 32, mock: {documents: 64, document_length: 200}}\n"
                        << "batch_size: 4\nmax_steps: " << steps << "\n"
                        << "optimizer: {lr: 3.0e-3}\nlr_scheduler: {warmup_steps: 3}\n"
                        << "eval: {every_n_steps: 0, max_batches: 2}\nlog_every_n_steps: 1\n"
                        << extra;
    return path;
  }

  int run(const std::vector<std::string>& args) { return run_hone_to_log(args, root_ + "/log.txt"); }
  std::string log() { return read_file(root_ + "/log.txt"); }

  // The train losses of a run, by step.
  std::map<int64_t, double> losses(const std::string& run) {
    std::map<int64_t, double> out;
    std::ifstream in(root_ + "/" + run + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      if (j.contains("loss/train/total")) out[j["step"]] = j["loss/train/total"];
    }
    return out;
  }

  std::string root_;
};

TEST_F(TrainingRun, ResumingFromACheckpointReproducesTheRunExactly) {
  // The uninterrupted run keeps every checkpoint; a second run starts from a copy
  // of the one at step 8 and must end bit-identical.
  ASSERT_EQ(run({"run", "pretrain", "--config", config("full", 20, "checkpoint: {every_n_steps: 8, keep_last_n: 0}\n")}),
            0)
      << log();
  fs::create_directories(root_ + "/resumed");
  fs::copy(root_ + "/full/step_0000008", root_ + "/resumed/step_0000008");
  std::ofstream(root_ + "/resumed/latest") << "step_0000008\n";
  ASSERT_EQ(run({"run", "pretrain", "--config",
                 config("resumed", 20, "checkpoint: {every_n_steps: 8, keep_last_n: 0}\nresume: latest\n")}),
            0)
      << log();
  EXPECT_NE(log().find("resumed from"), std::string::npos);

  const auto full = losses("full"), resumed = losses("resumed");
  ASSERT_EQ(resumed.size(), 12u);  // steps 9..20
  for (const auto& [step, loss] : resumed) EXPECT_EQ(loss, full.at(step)) << "step " << step;
  SafetensorsFile a(root_ + "/full/step_0000020/model.safetensors");
  SafetensorsFile b(root_ + "/resumed/step_0000020/model.safetensors");
  for (const std::string& name : a.names()) {
    EXPECT_EQ(a.load(name).to_vector<float>(), b.load(name).to_vector<float>()) << name;
  }
}

TEST_F(TrainingRun, SigkillAtAnyMomentLeavesALoadableCheckpoint) {
  // Checkpoints every step, so most kills land in the middle of a save.
  const std::string cfg = config("killed", 100000, "checkpoint: {every_n_steps: 1, keep_last_n: 2}\nresume: latest\n"
                                                   "logging: {tensorboard: false}\n");
  const std::string run_dir = root_ + "/killed";
  Generator rng(11);
  int64_t last_step = 0;
  for (int attempt = 0; attempt < 12; ++attempt) {
    Process p = start_hone({"run", "pretrain", "--config", cfg}, root_ + "/log.txt");
    // Once this attempt has saved a checkpoint of its own, it is in the
    // train-and-save loop: kill it at a random moment of that loop.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int64_t step = last_step;
    while (step <= last_step && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      try {
        if (auto folder = find_checkpoint(run_dir, "latest")) step = std::stoll(fs::path(*folder).filename().string().substr(5));
      } catch (const Error&) {
        // `latest` is being replaced this very moment
      }
    }
    ASSERT_GT(step, last_step) << "attempt " << attempt << " saved no checkpoint within a minute\n" << log();
    std::this_thread::sleep_for(std::chrono::milliseconds(int(rng.next_below(150))));
    ::kill(p.pid, SIGKILL);
    EXPECT_EQ(wait_for(p), 128 + SIGKILL);
    auto folder = find_checkpoint(run_dir, "latest");
    ASSERT_TRUE(folder.has_value());
    EXPECT_NO_THROW(verify_checkpoint(*folder)) << *folder;
    last_step = std::stoll(fs::path(*folder).filename().string().substr(5));
  }
  // And the run goes on from the last one.
  EXPECT_EQ(run({"run", "pretrain", "--config", cfg, "max_steps=" + std::to_string(last_step + 1)}), 0) << log();
}

TEST_F(TrainingRun, SigintFinishesTheStepSavesAndExitsZero) {
  const std::string cfg = config("interrupted", 100000, "logging: {tensorboard: false}\n");
  Process p = start_hone({"run", "pretrain", "--config", cfg}, root_ + "/log.txt");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ::kill(p.pid, SIGINT);
  EXPECT_EQ(wait_for(p), 0) << log();
  EXPECT_NE(log().find("stop requested"), std::string::npos) << log();
  auto folder = find_checkpoint(root_ + "/interrupted", "latest");
  ASSERT_TRUE(folder.has_value());
  EXPECT_NO_THROW(verify_checkpoint(*folder));
}

TEST_F(TrainingRun, NonFiniteLossesAreSkippedThenStopTheRun) {
  // A learning rate this large sends the weights to infinity within a few steps.
  EXPECT_EQ(run({"run", "pretrain", "--config", config("diverged", 50), "optimizer.lr=1e30",
                 "optimizer.max_grad_norm=0", "lr_scheduler.name=constant", "lr_scheduler.warmup_steps=0"}),
            2);
  EXPECT_NE(log().find("step skipped (1 in a row)"), std::string::npos) << log();
  EXPECT_NE(log().find("3 steps in a row had a non-finite loss"), std::string::npos) << log();
}

TEST_F(TrainingRun, TrainsOnMegatronDatasetsAndBlends) {
  // Two datasets of learnable progressions, written as `hone preprocess` would.
  for (const char* name : {"a", "b"}) {
    data::MegatronWriter w(root_ + "/" + name + "_text_document", data::MegatronDType::u16, 256);
    for (int doc = 0; doc < 40; ++doc) {
      std::vector<int32_t> tokens;
      for (int i = 0; i < 150; ++i) tokens.push_back((doc * 7 + i * (1 + doc % 5)) % 256);
      w.add_document(tokens);
    }
    w.finish();
  }
  const std::string path = config("megatron", 40);
  ASSERT_EQ(run({"run", "pretrain", "--config", path, "dataset.type=megatron", "dataset.path=" + root_ + "/a_text_document"}),
            0)
      << log();
  const auto l = losses("megatron");
  EXPECT_LT(l.at(40), l.at(1) - 1.0) << "the loss should fall on learnable data";
  ASSERT_EQ(run({"run", "pretrain", "--config", config("blend", 5), "dataset.type=megatron",
                 "dataset.path='0.3 " + root_ + "/a_text_document 0.7 " + root_ + "/b_text_document'"}),
            0)
      << log();
  EXPECT_NE(log().find("b_text_document (40 documents)"), std::string::npos) << log();
  EXPECT_EQ(run({"run", "pretrain", "--config", config("missing", 5), "dataset.type=megatron",
                 "dataset.path=" + root_ + "/nope"}),
            2);
  EXPECT_NE(log().find("nope.idx"), std::string::npos) << log();
}

TEST_F(TrainingRun, WritesTheDocumentedMetricsAndFiles) {
  ASSERT_EQ(run({"run", "pretrain", "--config", config("metrics", 6)}), 0) << log();
  std::ifstream in(root_ + "/metrics/metrics.jsonl");
  std::string line;
  std::getline(in, line);
  auto j = nlohmann::json::parse(line);
  for (const char* key : {"step", "loss/train/total", "metrics/train/LanguageCrossEntropy",
                          "metrics/train/LanguagePerplexity", "throughput/samples_per_sec",
                          "throughput/device/samples_per_sec", "throughput/tokens_per_sec", "throughput/mfu",
                          "memory/allocated_mem", "memory/reserved_mem", "lr", "grad_norm", "time/train",
                          "time/token"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  const std::string csv = read_file(root_ + "/metrics/perf_summary.csv");
  EXPECT_EQ(csv.rfind("model,precision,world_size,", 0), 0u);
  EXPECT_NE(csv.find("\nllama_tiny,fp32,1,4,32,"), std::string::npos) << csv;
  EXPECT_TRUE(fs::exists(root_ + "/metrics/config.yaml"));
  EXPECT_TRUE(fs::exists(root_ + "/metrics/train.log"));
  EXPECT_FALSE(fs::is_empty(root_ + "/metrics/tensorboard"));
  EXPECT_NE(read_file(root_ + "/metrics/train.log").find("validation loss"), std::string::npos);
}

}  // namespace
}  // namespace hone::test
