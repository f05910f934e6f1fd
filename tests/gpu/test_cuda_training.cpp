// The trainer on `device: cuda` (#8: the same trainer runs on CUDA by setting
// the device): a pretraining run on mock data against the same run on the CPU,
// step by step (training and validation losses); a run resumed from the GPU
// run's checkpoint repeats its steps; the memory metrics are the device
// allocator's.
#include <unistd.h>

#include <filesystem>

#include "cuda_test.hpp"
#include "hone/config/config.hpp"
#include "hone/ops/ops.hpp"
#include "hone/train/recipes.hpp"

namespace hone::test {
namespace {

namespace fs = std::filesystem;

class CudaTraining : public Cuda, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    Cuda::SetUp();
    if (IsSkipped()) return;
    root_ = testing::TempDir() + "hone_cuda_training_" + std::to_string(::getpid());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    if (!root_.empty()) fs::remove_all(root_);
  }

  // Six steps of llama_tiny on mock data in GetParam()'s dtype, validated every
  // three, with a checkpoint every three.
  void train(const std::string& run, const std::string& device, const std::string& extra = "") {
    const std::string yaml = "recipe: pretrain\noutput_dir: " + dir(run) + "\ndevice: " + device +
                             "\ndtype: " + GetParam() + "\nseed: 7\nmodel: {name: llama_tiny}\n" +
                             "dataset: {type: mock, seq_len: 32, mock: {documents: 64, document_length: 200}}\n" +
                             "batch_size: 4\nmax_steps: 6\noptimizer: {lr: 3.0e-3}\nlr_scheduler: {warmup_steps: 2}\n" +
                             "eval: {first: true, every_n_steps: 3, max_batches: 2}\n" +
                             "checkpoint: {every_n_steps: 3, keep_last_n: 0}\nlog_every_n_steps: 1\n" + extra;
    const Config resolved = find_recipe("pretrain").schema.resolve(Config::from_yaml(yaml, run + ".yaml"));
    ASSERT_EQ(run_pretrain(resolved), 0) << run;
  }

  std::string dir(const std::string& run) const { return root_ + "/" + run; }

  std::string root_;
};

// Losses of the two runs at every step either logged (`points` of them), within `tolerance` relative.
void expect_same_curve(const std::map<int64_t, double>& actual, const std::map<int64_t, double>& expected,
                       size_t points, double tolerance, const std::string& what) {
  ASSERT_EQ(expected.size(), points) << what;
  ASSERT_EQ(actual.size(), points) << what;
  for (const auto& [step, loss] : expected) {
    ASSERT_TRUE(actual.contains(step)) << what << " at step " << step;
    EXPECT_NEAR(actual.at(step), loss, tolerance * loss) << what << " at step " << step;
  }
}

TEST_P(CudaTraining, PretrainingFollowsTheCpuAndResumesFromItsCheckpoint) {
  // fp32: the GPU sums in another order than the CPU, and six AdamW steps carry
  // that on; bf16 rounds every activation, differently on each (the loss-curve
  // check of tests/gpu/compare_curves.py allows 1.5% over 200 steps).
  const double tolerance = GetParam() == "fp32" ? 1e-4 : 1e-2;
  train("cpu", "cpu");
  train("cuda", "cuda");
  const auto losses = run_metric(dir("cuda"), "loss/train/total");
  expect_same_curve(losses, run_metric(dir("cpu"), "loss/train/total"), 6, tolerance, "training loss");
  const std::string validation = "metrics/eval/LanguageCrossEntropy";
  expect_same_curve(run_metric(dir("cuda"), validation), run_metric(dir("cpu"), validation), 3, tolerance,
                    "validation loss");

  // The device allocator's counts: they hold cuBLASLt's workspace, which the
  // host's (3.5 MiB in all for this run) never do, and the peak bounds them.
  const double workspace = double(ops::gemm_workspace_bytes(kGpu));
  const auto allocated = run_metric(dir("cuda"), "memory/allocated_mem");
  const auto peak = run_metric(dir("cuda"), "memory/peak_allocated_mem");
  ASSERT_EQ(allocated.size(), 6u);
  for (const auto& [step, gigabytes] : allocated) {
    EXPECT_GE(gigabytes * 1e9, workspace) << "step " << step;
    EXPECT_GE(peak.at(step), gigabytes) << "step " << step;
  }

  // Steps 4 to 6 again from the step-3 checkpoint the GPU run saved.
  fs::create_directories(dir("resumed"));
  fs::copy(dir("cuda") + "/step_0000003", dir("resumed") + "/step_0000003");
  train("resumed", "cuda", "resume: " + dir("resumed") + "/step_0000003\n");
  const auto resumed = run_metric(dir("resumed"), "loss/train/total");
  ASSERT_EQ(resumed.size(), 3u);
  for (const auto& [step, loss] : resumed) EXPECT_NEAR(loss, losses.at(step), 1e-6 * loss) << "step " << step;
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaTraining, ::testing::Values("fp32", "bf16"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace hone::test
