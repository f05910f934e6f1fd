// The `hone` binary as a user runs it: exit codes, one-line errors, bench's JSON.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <cstdio>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

#include "data/tokenizers/assets.hpp"
#include "hone/core/files.hpp"
#include "hone/model/config.hpp"
#include "hone/train/recipes.hpp"
#include "hone/train/run_config.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

struct CliResult {
  int status = -1;
  std::string out, err;
};

// `env`: variables set for hone ("RANK=1 WORLD_SIZE=2").
CliResult run_hone(const std::string& args, const std::string& env = "") {
  // Per process: ctest runs the tests of this file in parallel processes.
  const std::string err_path = testing::TempDir() + "hone_cli_stderr_" + std::to_string(::getpid()) + ".txt";
  const std::string command = "env " + env + " " + std::string(HONE_BINARY_DIR) + "/bin/hone " + args + " 2>" + err_path;
  CliResult r;
  FILE* pipe = popen(command.c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  FILE* err = fopen(err_path.c_str(), "r");
  while ((n = fread(buf.data(), 1, buf.size(), err)) > 0) r.err.append(buf.data(), n);
  fclose(err);
  std::remove(err_path.c_str());
  return r;
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  return t.substr(t.rfind('\n') == std::string::npos ? 0 : t.rfind('\n') + 1);
}

TEST(Cli, VersionAndHelp) {
  CliResult v = run_hone("--version");
  EXPECT_EQ(v.status, 0);
  EXPECT_EQ(v.out.rfind("hone ", 0), 0u) << v.out;
  CliResult h = run_hone("--help");
  EXPECT_EQ(h.status, 0);
  EXPECT_NE(h.out.find("bench"), std::string::npos);
  // hone run's line names every recipe.
  const size_t run_at = h.out.find("  run ");
  const std::string run_line = h.out.substr(run_at, h.out.find('\n', run_at) - run_at);
  for (const Recipe& r : recipes()) EXPECT_NE(run_line.find(r.name), std::string::npos) << r.name << ": " << run_line;
}

TEST(Cli, CommandLineMistakesAreOneErrorLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "hone: error: A subcommand is required (see hone --help)\n"},
      {"conver a b", "hone: error: unknown command 'conver' (did you mean 'convert'?) (see hone --help)\n"},
      {"convert a", "hone: error: dest is required (see hone convert --help)\n"},
      {"bench --steps x", "hone: error: --steps: expected a positive whole number, got x (see hone bench --help)\n"},
      {"run pretrain --config quickstart --config summarize_lora",
       "hone: error: --config is given 2 times: it takes one value (see hone run --help)\n"},
  };
  for (const auto& [args, expected] : cases) {
    const CliResult r = run_hone(args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_EQ(r.err, expected) << args;
    EXPECT_EQ(r.out, "") << args;
  }
}

// Mistral's tokenizer.json: special tokens in the text are text unless
// --special (then as transformers' encode(text, add_special_tokens=False));
// --decode prints U+FFFD where the ids cut a character (byte 0xE2 alone).
TEST(Cli, TokenizeEncodesAndDecodes) {
  const std::string tokenizer = "tokenize --tokenizer " + asset_path("tokenizers/mistral") + " ";
  CliResult r = run_hone(tokenizer + "--text 'Hello world <s> x'");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[22557, 1526, 523, 28713, 28767, 1318]\n");
  r = run_hone(tokenizer + "--special --text 'Hello world <s> x'");
  EXPECT_EQ(r.out, "[22557, 1526, 28705, 1, 28705, 1318]\n");
  r = run_hone(tokenizer + "--decode --text '[22557, 229]'");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "Hello\xEF\xBF\xBD");
}

// What a command prints for a script must reach it: a full disk under a
// redirect (/dev/full) is an error naming standard output, not exit 0.
TEST(Cli, AFailedWriteToStandardOutputIsAnError) {
  for (const char* command : {"ls pretrain", "validate quickstart"}) {
    const CliResult r = run_hone(std::string(command) + " >/dev/full");
    EXPECT_EQ(r.status, 2) << command << "\n" << r.err;
    EXPECT_NE(r.err.find("hone: error: standard output: cannot write"), std::string::npos) << command << "\n" << r.err;
  }
}

TEST(Cli, BenchPrintsTheDocumentedJson) {
  CliResult r = run_hone("bench --model llama_tiny --batch-size 2 --seq-len 32 --steps 3 --dtype fp32");
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(last_line(r.out));
  for (const char* key : {"model", "dtype", "device", "batch_size", "seq_len", "steps", "tokens_per_sec",
                          "step_time_s", "tflops", "mfu", "gemm_peak_tflops", "peak_memory_bytes"}) {
    EXPECT_TRUE(j.contains(key)) << "missing " << key << " in " << j.dump();
  }
  EXPECT_EQ(j["model"], "llama_tiny");
  EXPECT_EQ(j["batch_size"], 2);
  EXPECT_EQ(j["steps"], 3);
  EXPECT_TRUE(j["bf16_products"].is_null()) << "an fp32 run has no bf16 products: " << j.dump();
  EXPECT_GT(j["tokens_per_sec"].get<double>(), 0);
  EXPECT_GT(j["mfu"].get<double>(), 0);
  EXPECT_LT(j["mfu"].get<double>(), 1.5);
  EXPECT_EQ(j["mfu_peak_tflops"], j["gemm_peak_tflops"]);
  // Random tokens over 256 ids: the loss starts at about ln(256) and falls.
  EXPECT_NEAR(j["loss_first"].get<double>(), std::log(256.0), 0.2);
  EXPECT_LT(j["loss_last"].get<double>(), j["loss_first"].get<double>());
  EXPECT_GT(j["peak_memory_bytes"].get<double>(), j["activation_bytes"].get<double>());
}

// A GPU's MFU goal counts against its datasheet peak, not the measured one.
TEST(Cli, BenchMfuAgainstAGivenPeak) {
  const CliResult r = run_hone("bench --model llama_tiny --batch-size 2 --seq-len 32 --steps 2 --peak-tflops 0.5");
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(last_line(r.out));
  EXPECT_EQ(j["mfu_peak_tflops"].get<double>(), 0.5);
  EXPECT_NEAR(j["mfu"].get<double>(), j["tflops"].get<double>() / 0.5, 1e-12);
  EXPECT_GT(j["gemm_peak_tflops"].get<double>(), 0);
  for (const std::string bad : {"0", "-3", "1e400"}) {  // 1e400: out of range, not infinity
    const CliResult e = run_hone("bench --model llama_tiny --steps 1 --peak-tflops " + bad);
    EXPECT_EQ(e.status, 2) << bad;
    EXPECT_NE(e.err.find("--peak-tflops: expected a positive number, got " + bad), std::string::npos) << e.err;
  }
}

// HONE_PROFILE=1: at exit, each op's calls and time, the timed steps' alone.
TEST(Cli, ProfilePrintsTheOpsOfTheTimedSteps) {
  setenv("HONE_PROFILE", "1", 1);
  const CliResult r = run_hone("bench --model llama_tiny --batch-size 2 --seq-len 32 --steps 2");
  unsetenv("HONE_PROFILE");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("hone profile (HONE_PROFILE)"), std::string::npos) << r.err;
  // Two layers, four projections each, and the head: 9 products a forward pass.
  const std::string linear = "\nlinear" + std::string(18, ' ');  // padded to the longest op's name (> 24)
  const size_t row = r.err.find(linear);
  ASSERT_NE(row, std::string::npos) << r.err;
  EXPECT_EQ(std::stoll(r.err.substr(row + linear.size())), 2 * 9) << r.err.substr(row, 80);
  // The GEMM peak, measured after the steps, is not a training op.
  EXPECT_EQ(r.err.find("\nmatmul"), std::string::npos) << r.err;
  // Off as a shell or YAML user writes it (false was on).
  for (const char* off : {"false", "off", "No", "0"}) {
    setenv("HONE_PROFILE", off, 1);
    const CliResult quiet = run_hone("bench --model llama_tiny --batch-size 2 --seq-len 32 --steps 1");
    unsetenv("HONE_PROFILE");
    ASSERT_EQ(quiet.status, 0) << quiet.err;
    EXPECT_EQ(quiet.err.find("hone profile"), std::string::npos) << off;
  }
}

TEST(Cli, BenchTrainsLoraAdaptersWhenAsked) {
  CliResult r = run_hone("bench --model llama_tiny --batch-size 2 --seq-len 32 --steps 3 --lora-rank 4");
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(last_line(r.out));
  EXPECT_EQ(j["lora_rank"], 4);
  // Rank 4 on q, v, output_proj, gate, up and down of 2 layers (dim 64, 2 KV heads of 16, ffn 192).
  const int64_t per_layer = 4 * ((64 + 64) + (64 + 32) + (64 + 64) + 2 * (64 + 192) + (192 + 64));
  EXPECT_EQ(j["trained_params"], 2 * per_layer);
  // The frozen weights take part in the forward pass and input gradients only: 4·N, not 6·N.
  const ModelConfig c = model_preset("llama_tiny");
  EXPECT_NEAR(j["flops_per_token"].get<double>(),
              c.training_flops_per_token(32) - 2.0 * double(c.num_matmul_params()) + 6.0 * 2 * per_layer, 1.0);
  EXPECT_LT(j["loss_last"].get<double>(), j["loss_first"].get<double>());
  EXPECT_EQ(run_hone("bench --model llama_tiny --lora-rank -1").status, 2);
  EXPECT_FALSE(j["dora"].get<bool>());

  // DoRA's magnitudes: one more trained parameter per adapted row.
  r = run_hone("bench --model llama_tiny --batch-size 2 --seq-len 32 --steps 3 --lora-rank 4 --dora");
  ASSERT_EQ(r.status, 0) << r.err;
  j = nlohmann::json::parse(last_line(r.out));
  EXPECT_TRUE(j["dora"].get<bool>());
  EXPECT_EQ(j["trained_params"], 2 * (per_layer + 64 + 32 + 64 + 2 * 192 + 64));
  EXPECT_LT(j["loss_last"].get<double>(), j["loss_first"].get<double>());
  const CliResult alone = run_hone("bench --model llama_tiny --dora");
  EXPECT_EQ(alone.status, 2);
  EXPECT_NE(alone.err.find("--dora makes the adapters DoRA's: give --lora-rank"), std::string::npos) << alone.err;
}

// Offloading the checkpointed layer inputs to host memory is for GPU runs: on
// the CPU, or without checkpointing, it is a one-line error.
TEST(Cli, ActivationOffloadingNeedsCheckpointingOnAGpu) {
  for (const char* flags : {"--activation-offloading", "--activation-offloading --activation-checkpointing"}) {
    const CliResult r = run_hone(std::string("bench --model llama_tiny --steps 1 ") + flags);
    EXPECT_EQ(r.status, 2) << flags;
    EXPECT_NE(r.err.find("--activation-offloading keeps the checkpointed layer inputs in host memory"),
              std::string::npos) << r.err;
  }
  const CliResult v = run_hone("validate quickstart enable_activation_checkpointing=true enable_activation_offloading=true");
  EXPECT_EQ(v.status, 2);
  EXPECT_NE(v.err.find("enable_activation_offloading keeps the checkpointed layer inputs in host memory during a GPU "
                       "run: it needs enable_activation_checkpointing: true and device: cuda"),
            std::string::npos) << v.err;
}

TEST(Cli, BenchRunsSequencesBeyondThePresetsLimitWhenAsked) {
  CliResult r = run_hone("bench --model llama_tiny --batch-size 1 --seq-len 300 --max-seq-len 300 --steps 1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(last_line(r.out))["seq_len"], 300);
}

// --model CONFIG: the config's model, batch, sequence length, dtype and
// activation checkpointing, its key=value overrides applied, and the options
// given on the command line over them.
TEST(Cli, BenchTakesATrainingConfig) {
  const std::string shrunk = " batch_size=2 dataset.seq_len=32 model.n_layers=1 model.vocab_size=512 threads=1";
  CliResult r = run_hone("bench --model quickstart --steps 1 enable_activation_checkpointing=true" + shrunk);
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(last_line(r.out));
  EXPECT_EQ(j["config"], "configs/quickstart.yaml");
  EXPECT_EQ(j["batch_size"], 2);
  EXPECT_EQ(j["seq_len"], 32);
  EXPECT_EQ(j["dtype"], "bf16");
  EXPECT_TRUE(j["bf16_products"] == "native" || j["bf16_products"] == "widened") << j.dump();
  EXPECT_EQ(j["threads"], 1);
  EXPECT_EQ(j["activation_checkpointing"], true);
  // configs/quickstart.yaml's model with the overrides: vocabulary 512 (tied), dim 256, 1 layer of 8 heads of
  // 32 and 4 KV heads, FFN 704.
  EXPECT_EQ(j["params"], 512 * 256 + (2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 704 + 2 * 256) + 256);
  // Named as the built-in model it changes, with the changes.
  EXPECT_EQ(j["model"], "llama_tiny with vocab_size 512, dim 256, n_layers 1, n_heads 8, n_kv_heads 4, ffn_dim 704, "
                        "tie_embeddings true");

  EXPECT_NE(j["mfu_peak_tflops"], 100);
  r = run_hone("bench --model quickstart --steps 1 mfu_peak_tflops=100" + shrunk);  // the config's datasheet peak
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(last_line(r.out))["mfu_peak_tflops"], 100);

  r = run_hone("bench --model quickstart --steps 1 --batch-size 1 --seq-len 16 --dtype fp32" + shrunk);
  ASSERT_EQ(r.status, 0) << r.err;
  j = nlohmann::json::parse(last_line(r.out));
  EXPECT_EQ(j["batch_size"], 1);
  EXPECT_EQ(j["seq_len"], 16);
  EXPECT_EQ(j["dtype"], "fp32");
  EXPECT_EQ(j["activation_checkpointing"], false);

  // A config without the output_dir its recipe requires: bench writes nothing.
  const std::string no_output = testing::TempDir() + "/no_output_dir.yaml";
  std::ofstream(no_output) << "recipe: pretrain\nmodel: {name: llama_tiny}\ndataset: {type: mock, seq_len: 16}\n"
                              "batch_size: 1\nmax_steps: 1\n";
  r = run_hone("bench --model " + no_output + " --steps 1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(last_line(r.out))["seq_len"], 16);
  EXPECT_EQ(nlohmann::json::parse(last_line(r.out))["model"], "llama_tiny");  // unchanged

  // A built-in model's report names no config.
  r = run_hone("bench --model llama_tiny --batch-size 1 --seq-len 16 --steps 1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(last_line(r.out))["config"].is_null());
}

// A fine-tuning config's model is the one at checkpoint.path (its config.json
// alone is read); a LoRA config's adapters are trained, unless --lora-rank says otherwise.
TEST(Cli, BenchTakesAFineTuningConfigsModelAndAdapters) {
  const std::string model = std::string(HONE_SOURCE_DIR) + "/tests/reference/hf/llama32_tied_bf16";
  const std::string config = "bench --model llama3_2/1B_lora --steps 1 checkpoint.path=" + model +
                             " dataset.max_seq_len=16 batch_size=2 model.lora_rank=2 dtype=fp32";
  CliResult r = run_hone(config);
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(last_line(r.out));
  EXPECT_EQ(j["config"], "configs/llama3_2/1B_lora.yaml");
  EXPECT_EQ(j["seq_len"], 16);
  EXPECT_EQ(j["batch_size"], 2);
  EXPECT_EQ(j["lora_rank"], 2);
  // Vocabulary 40 (tied), dim 32, 2 layers of 4 heads of 8 and 1 KV head, FFN 48.
  const int64_t per_layer = 32 * 32 + 2 * 32 * 8 + 32 * 32 + 3 * 32 * 48 + 2 * 32;
  EXPECT_EQ(j["params"], 40 * 32 + 2 * per_layer + 32);
  EXPECT_LT(j["trained_params"].get<int64_t>(), j["params"].get<int64_t>());

  r = run_hone(config + " --lora-rank 0");
  ASSERT_EQ(r.status, 0) << r.err;
  j = nlohmann::json::parse(last_line(r.out));
  EXPECT_EQ(j["lora_rank"], 0);
  EXPECT_EQ(j["trained_params"], j["params"]);

  const CliResult missing = run_hone("bench --model llama3_2/1B_lora");
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.err.find("checkpoint.path hf/Llama-3.2-1B"), std::string::npos) << missing.err;
  EXPECT_NE(missing.err.find("does not exist here"), std::string::npos) << missing.err;
}

// A lora_dpo config times DPO's step: batch_size pairs, twice as many rows, the
// reference's forward pass counted in the FLOPs.
TEST(Cli, BenchTimesADpoConfigsStep) {
  const std::string model = std::string(HONE_SOURCE_DIR) + "/tests/reference/hf/llama32_tied_bf16";
  const std::string dpo = "bench --model llama3_1/8B_lora_dpo --steps 1 checkpoint.path=" + model +
                          " dataset.max_seq_len=16 batch_size=2 dtype=fp32 enable_activation_checkpointing=false";
  const CliResult r = run_hone(dpo);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(last_line(r.out));
  EXPECT_EQ(j["config"], "configs/llama3_1/8B_lora_dpo.yaml");
  EXPECT_EQ(j["dpo"], true);
  EXPECT_EQ(j["batch_size"], 4);  // rows: 2 pairs
  EXPECT_NEAR(j["loss_first"].get<double>(), std::log(2.0), 1e-6);  // B = 0: the model is its reference

  // A built-in model with --dpo: LoRA's FLOPs plus the reference's forward pass
  // (a third of the whole model's training FLOPs).
  const std::string preset = "bench --model llama_tiny --batch-size 4 --seq-len 32 --steps 1 --lora-rank 4";
  const CliResult lora = run_hone(preset), with_dpo = run_hone(preset + " --dpo");
  ASSERT_EQ(lora.status, 0) << lora.err;
  ASSERT_EQ(with_dpo.status, 0) << with_dpo.err;
  const auto l = nlohmann::json::parse(last_line(lora.out)), d = nlohmann::json::parse(last_line(with_dpo.out));
  EXPECT_EQ(l["dpo"], false);
  EXPECT_EQ(d["dpo"], true);
  EXPECT_NEAR(d["flops_per_token"].get<double>(),
              l["flops_per_token"].get<double>() + model_preset("llama_tiny").training_flops_per_token(32) / 3, 1.0);
  // Without adapters: the whole model's training FLOPs and the frozen copy's
  // forward pass, the copy's weights and activations in the estimate.
  const std::string full = "bench --model llama_tiny --batch-size 4 --seq-len 32 --steps 1";
  const CliResult whole = run_hone(full), whole_dpo = run_hone(full + " --dpo");
  ASSERT_EQ(whole.status, 0) << whole.err;
  ASSERT_EQ(whole_dpo.status, 0) << whole_dpo.err;
  const auto w = nlohmann::json::parse(last_line(whole.out)), wd = nlohmann::json::parse(last_line(whole_dpo.out));
  EXPECT_NEAR(wd["loss_first"].get<double>(), std::log(2.0), 1e-6);  // the model starts as its reference
  EXPECT_NEAR(wd["flops_per_token"].get<double>(), w["flops_per_token"].get<double>() * 4 / 3, 1.0);
  const ModelConfig tiny = model_preset("llama_tiny");
  EXPECT_EQ(wd["memory_estimate_bytes"].get<size_t>(),
            w["memory_estimate_bytes"].get<size_t>() + reference_model_bytes(tiny, DType::f32, 4, 32));
  EXPECT_GT(wd["peak_memory_bytes"].get<size_t>(), w["peak_memory_bytes"].get<size_t>());
  EXPECT_LE(wd["peak_memory_bytes"].get<double>(), 1.1 * wd["memory_estimate_bytes"].get<double>());
  const CliResult odd = run_hone("bench --model llama_tiny --batch-size 3 --lora-rank 4 --dpo");
  EXPECT_EQ(odd.status, 2);
  EXPECT_NE(odd.err.find("an even batch size, got 3 rows"), std::string::npos) << odd.err;
}

// A device that cannot run fails before comm-bench prints its table's header.
TEST(Cli, CommBenchOnAnUnusableDevicePrintsNoTable) {
  const CliResult r = run_hone("comm-bench --device cuda -b 1K -e 1K --iters 1 --warmup 0");
  if (r.status == 0) GTEST_SKIP() << "a GPU is usable here";
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("cuda"), std::string::npos) << r.err;
}

TEST(Cli, BenchRefusesWhatItCannotTime) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bench --model quickstrt", "no built-in model, built-in config or config file has that name (did you mean "
                                  "'quickstart'?)"},
      {"bench --model llama_tiny batch_size=2", "key=value overrides (batch_size=2) change a config; --model "
                                                "llama_tiny is a built-in model"},
      {"bench --model quickstart distributed.tp=2", "hone bench runs one process, without tensor parallelism"},
      {"bench --model quickstart no_such_key=1", "no_such_key"},
  };
  for (const auto& [args, message] : cases) {
    const CliResult r = run_hone(args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  const std::string generate = testing::TempDir() + "hone_bench_generate.yaml";
  std::ofstream(generate) << "recipe: generate\ncheckpoint:\n  path: somewhere\nprompt: hi\n";
  const CliResult r = run_hone("bench --model " + generate);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("a config of the generate recipe; hone bench times training"), std::string::npos) << r.err;
}

TEST(Cli, MemoryEstimateIsWithinTenPercentOfThePeak) {
  for (const char* extra : {"", " --activation-checkpointing", " --dtype bf16", " --dtype bf16 --lora-rank 4",
                            " --lora-rank 4 --activation-checkpointing"}) {
    CliResult r = run_hone(std::string("bench --model llama_tiny --batch-size 4 --seq-len 128 --steps 2") + extra);
    ASSERT_EQ(r.status, 0) << r.err;
    auto j = nlohmann::json::parse(last_line(r.out));
    const double peak = j["peak_memory_bytes"], estimate = j["memory_estimate_bytes"];
    EXPECT_NEAR(estimate / peak, 1.0, 0.10) << extra << ": estimate " << estimate << ", peak " << peak;
  }
}

TEST(Cli, EveryBuiltinConfigValidates) {
  const CliResult ls = run_hone("ls");
  ASSERT_EQ(ls.status, 0);
  std::istringstream lines(ls.out.substr(ls.out.find("CONFIG")));
  std::string line;
  std::getline(lines, line);  // the header
  int validated = 0;
  while (std::getline(lines, line) && !line.empty()) {
    const std::string name = line.substr(0, line.find(' '));
    const CliResult v = run_hone("validate " + name);
    EXPECT_EQ(v.status, 0) << name << ": " << v.err;
    EXPECT_NE(v.out.find("valid for the"), std::string::npos) << name;
    ++validated;
  }
  EXPECT_GE(validated, 15);  // generation and eleuther_evaluation among them
  // The pretraining configs count their parameters and estimate their memory up front.
  const std::string llama8b = run_hone("validate llama3_1/8B_pretrain").out;
  EXPECT_NE(llama8b.find("# model: llama3_1_8B (llama family), 8030.3M parameters"), std::string::npos) << llama8b;
  EXPECT_NE(llama8b.find("# memory estimate on cpu (bf16)"), std::string::npos) << llama8b;
  // On the CPU the estimate is held against this machine's memory (the 8B run
  // needs 169 GiB).
  const double host = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGE_SIZE));
  EXPECT_EQ(llama8b.find("more than this machine's") != std::string::npos, host < 169.0 * (1 << 30)) << llama8b;
  EXPECT_EQ(run_hone("validate quickstart").out.find("more than this machine's"), std::string::npos);
  // Exports go inside the run's output_dir, wherever it is moved (a second run elsewhere found the first's).
  const std::string lora = run_hone("validate llama3_2/1B_lora output_dir=/tmp/elsewhere").out;
  EXPECT_NE(lora.find("export:\n  peft: /tmp/elsewhere/peft\n"), std::string::npos) << lora;
}

// `hone ls RECIPE` lists every key the recipe's schema has, with its default,
// description and what values it takes.
TEST(Cli, LsRecipeListsItsKeys) {
  const CliResult ls = run_hone("ls pretrain");
  ASSERT_EQ(ls.status, 0) << ls.err;
  const auto row = [&](const std::string& key) {
    const size_t at = ls.out.find("\n" + key + " ");
    return at == std::string::npos ? std::string() : ls.out.substr(at + 1, ls.out.find('\n', at + 1) - at - 1);
  };
  for (const char* key : {"output_dir", "batch_size", "optimizer.betas", "lr_scheduler.name", "resume",
                          "dataset.seq_len", "distributed.zero", "enable_activation_checkpointing"}) {
    EXPECT_FALSE(row(key).empty()) << key << " missing from:\n" << ls.out;
  }
  EXPECT_NE(row("batch_size").find(" 8 "), std::string::npos) << row("batch_size");
  EXPECT_NE(row("batch_size").find("(an integer; must be in [1, 1048576])"), std::string::npos) << row("batch_size");
  EXPECT_NE(row("output_dir").find("(required)"), std::string::npos) << row("output_dir");
  EXPECT_NE(row("optimizer.betas").find("[0.9,0.95]"), std::string::npos) << row("optimizer.betas");
  EXPECT_NE(row("lr_scheduler.name").find("(one of constant, linear, cosine, wsd)"), std::string::npos);
  EXPECT_NE(run_hone("ls generate").out.find("\ntop_p "), std::string::npos);
  const CliResult typo = run_hone("ls pretrian");
  EXPECT_EQ(typo.status, 2);
  EXPECT_NE(typo.err.find("did you mean 'pretrain'"), std::string::npos) << typo.err;
  // torchtune's recipe names point to the one recipe that runs on any number of processes.
  const CliResult torchtune = run_hone("run lora_finetune_distributed --config summarize_lora");
  EXPECT_EQ(torchtune.status, 2);
  EXPECT_NE(torchtune.err.find("unknown recipe 'lora_finetune_distributed': torchtune's single-device and distributed "
                               "recipes are one here, 'lora_finetune', which runs on one device, or on several "
                               "processes under hone launch"),
            std::string::npos)
      << torchtune.err;
  // A config where the recipe goes is answered with the command that runs it;
  // validate and plan take one config, not two.
  const CliResult config_as_recipe = run_hone("run quickstart max_steps=5");
  EXPECT_EQ(config_as_recipe.status, 2);
  EXPECT_EQ(config_as_recipe.err,
            "hone: error: 'quickstart' is a config, not a recipe: hone run pretrain --config quickstart "
            "[key=value ...]\n");
  const CliResult two_configs = run_hone("validate quickstart --config summarize_lora");
  EXPECT_EQ(two_configs.status, 2);
  EXPECT_EQ(two_configs.err,
            "hone: error: validate: one config at a time: 'quickstart' and --config summarize_lora are two (the "
            "other settings go as key=value)\n");
  EXPECT_EQ(run_hone("validate max_steps=5 --config quickstart").status, 0);
  // An override or nothing where the recipe goes, a config among the overrides: what to type instead.
  const std::vector<std::pair<std::string, std::string>> misplaced = {
      {"run --config quickstart max_steps=5",
       "'max_steps=5' is an override where the recipe goes: hone run pretrain --config quickstart max_steps=5 ..."},
      {"run --config quickstart", "which recipe? hone run pretrain --config quickstart [key=value ...]"},
      {"run pretrain quickstart", "'quickstart' is a config where key=value overrides go: give it as --config "
                                  "quickstart"},
      {"validate quickstart quickstart",
       "'quickstart' is a config where key=value overrides go: hone validate takes one config (quickstart is given)"},
      {"run pretrain --config quickstart summarize_lora",
       "'summarize_lora' is a config where key=value overrides go: hone run takes one config (quickstart is given)"},
  };
  for (const auto& [args, error] : misplaced) {
    const CliResult r = run_hone(args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_EQ(r.err, "hone: error: " + error + "\n") << args;
  }
}

// hone plan takes the config's ZeRO stage and tp unless flags say otherwise, and
// when the layout does not fit it names the fastest change that does, which
// then fits.
TEST(Cli, PlanTakesTheConfigsLayoutAndHintsWhatFits) {
  const auto plan_json = [](const CliResult& r) { return nlohmann::json::parse(last_line(r.out)); };
  const CliResult from_config =
      run_hone("plan llama3_1/8B_pretrain --world-size 16 distributed.zero=2 distributed.tp=2");
  ASSERT_EQ(from_config.status, 0) << from_config.err;
  EXPECT_EQ(plan_json(from_config)["zero"], 2);
  EXPECT_EQ(plan_json(from_config)["tp"], 2);
  EXPECT_EQ(plan_json(run_hone("plan llama3_1/8B_pretrain --world-size 16 distributed.zero=2 --zero 1"))["zero"], 1);
  // A max_steps budget is max_steps global batches; the default peak is the run's dtype's.
  const nlohmann::json steps = plan_json(run_hone("plan gpt2/124M_pretrain --world-size 8 max_steps=100"));
  EXPECT_EQ(steps["steps"], 100);
  EXPECT_EQ(steps["tokens"], 100 * steps["tokens_per_step"].get<double>());
  EXPECT_NE(run_hone("plan gpt2/124M_pretrain --world-size 8 dtype=fp32").out.find("hardware   67 TFLOP/s peak"),
            std::string::npos);
  EXPECT_NE(run_hone("plan gpt2/124M_pretrain --world-size 8").out.find("hardware   989 TFLOP/s peak"),
            std::string::npos);

  const CliResult too_big = run_hone("plan llama3_1/8B_pretrain --world-size 8 batch_size=8");
  ASSERT_EQ(too_big.status, 0) << too_big.err;
  EXPECT_FALSE(plan_json(too_big)["fits"].get<bool>());
  const std::string hint = "hint: distributed.zero=3 enable_activation_checkpointing=true fits: ";
  ASSERT_NE(too_big.out.find(hint), std::string::npos) << too_big.out;
  const CliResult hinted =
      run_hone("plan llama3_1/8B_pretrain --world-size 8 batch_size=8 distributed.zero=3 "
               "enable_activation_checkpointing=true");
  EXPECT_TRUE(plan_json(hinted)["fits"].get<bool>()) << hinted.out;
  EXPECT_EQ(hinted.out.find("hint:"), std::string::npos) << hinted.out;
  EXPECT_NE(run_hone("plan llama3_1/8B_pretrain --world-size 2 batch_size=64").out.find("hint: no ZeRO stage fits"),
            std::string::npos);
}

// A full fine-tuning config's model is the one at checkpoint.path, its sequence
// length dataset.max_seq_len; LoRA, DPO and recipes that do not train are refused.
TEST(Cli, PlanSizesAFullFineTuningConfig) {
  const std::string model = std::string(HONE_SOURCE_DIR) + "/tests/reference/hf/llama32_tied_bf16";
  const CliResult r =
      run_hone("plan llama3_2/1B_full --world-size 2 dataset.max_seq_len=32 batch_size=4 checkpoint.path=" + model);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("4 x 32 tokens per micro-batch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 layers, dim 32"), std::string::npos) << r.out;
  const CliResult dpo = run_hone("plan llama3_2/1B_full_dpo --world-size 2");
  EXPECT_EQ(dpo.status, 2);
  EXPECT_NE(dpo.err.find("DPO's reference passes and frozen copy are not in its model yet"), std::string::npos)
      << dpo.err;
  const CliResult missing = run_hone("plan llama3_2/1B_full --world-size 2");
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.err.find("checkpoint.path hf/Llama-3.2-1B-Instruct does not exist here"), std::string::npos)
      << missing.err;
  const CliResult lora = run_hone("plan llama3_2/1B_lora --world-size 2");
  EXPECT_EQ(lora.status, 2);
  EXPECT_NE(lora.err.find("LoRA's adapters are too small to need a plan"), std::string::npos) << lora.err;
}

TEST(Cli, CpCopiesABuiltinConfigThatThenValidatesAndNeverOverwrites) {
  const std::string dest = testing::TempDir() + "hone_cp_" + std::to_string(::getpid()) + ".yaml";
  std::remove(dest.c_str());
  const CliResult cp = run_hone("cp llama3_2/1B_lora " + dest);
  ASSERT_EQ(cp.status, 0) << cp.err;
  EXPECT_EQ(cp.out, "copied llama3_2/1B_lora to " + dest + "\n");
  const std::string copied = read_file(dest);
  EXPECT_EQ(copied, read_file(source_path("configs/llama3_2/1B_lora.yaml")));
  const CliResult v = run_hone("validate " + dest);
  EXPECT_EQ(v.status, 0) << v.err;
  // An existing file is left alone; an unknown name gets a suggestion.
  const CliResult again = run_hone("cp llama3_2/1B_lora " + dest);
  EXPECT_EQ(again.status, 2);
  EXPECT_NE(again.err.find("exists"), std::string::npos) << again.err;
  EXPECT_EQ(read_file(dest), copied);
  const CliResult typo = run_hone("cp llama3_2/1B_lorra " + dest + ".other");
  EXPECT_EQ(typo.status, 2);
  EXPECT_NE(typo.err.find("did you mean 'llama3_2/1B_lora'"), std::string::npos) << typo.err;
  std::remove(dest.c_str());
  // Into a folder, as tune cp copies: FOLDER/1B_lora.yaml.
  const std::string folder = testing::TempDir() + "hone_cp_into_" + std::to_string(::getpid());
  std::filesystem::create_directories(folder);
  const CliResult into = run_hone("cp llama3_2/1B_lora " + folder);
  ASSERT_EQ(into.status, 0) << into.err;
  EXPECT_EQ(into.out, "copied llama3_2/1B_lora to " + folder + "/1B_lora.yaml\n");
  EXPECT_EQ(read_file(folder + "/1B_lora.yaml"), copied);
  // A name without a suffix gets .yaml, as tune cp gives it; --make-parents makes the folders.
  const CliResult bare = run_hone("cp llama3_2/1B_lora " + folder + "/mine");
  ASSERT_EQ(bare.status, 0) << bare.err;
  EXPECT_EQ(read_file(folder + "/mine.yaml"), copied);
  const CliResult deep = run_hone("cp llama3_2/1B_lora " + folder + "/a/b/mine.yaml");
  EXPECT_EQ(deep.status, 2);
  EXPECT_NE(deep.err.find(folder + "/a/b: no such folder to copy into (--make-parents creates it)"), std::string::npos)
      << deep.err;
  ASSERT_EQ(run_hone("cp llama3_2/1B_lora " + folder + "/a/b/mine.yaml --make-parents").status, 0);
  EXPECT_EQ(read_file(folder + "/a/b/mine.yaml"), copied);
  // A name ending in '/' is a folder, made with --make-parents (it was a hidden c/.yaml).
  ASSERT_EQ(run_hone("cp llama3_2/1B_lora " + folder + "/c/ --make-parents").status, 0);
  EXPECT_EQ(read_file(folder + "/c/1B_lora.yaml"), copied);
  std::filesystem::remove_all(folder);
}

// The system's refusals (here a file where a folder must be created; as root,
// permissions would not refuse) end in one line naming the key and the path the
// user gave (not a temporary file's), not an abort.
TEST(Cli, APathTheSystemRefusesIsAnErrorNamingIt) {
  const std::string file = testing::TempDir() + "hone_cli_not_a_folder_" + std::to_string(::getpid());
  std::ofstream(file) << "x";
  const std::pair<std::string, std::string> refused[] = {
      {"run pretrain output_dir=" + file + "/run model.name=llama_tiny dataset.type=mock dataset.seq_len=16 max_steps=1",
       "output_dir " + file + "/run: cannot create the folder: Not a directory"},
      {"convert " + std::string(HONE_SOURCE_DIR) + "/tests/reference/hf/gpt2 " + file + "/model --to hone",
       file + "/model: cannot create the folder: Not a directory"},
      {"cp quickstart " + file + "/quickstart.yaml", file + ": not a folder to copy into"},
      {"launch --nproc-per-node 1 --log-dir " + file + "/logs -- true",
       "--log-dir " + file + "/logs: cannot create the folder: Not a directory"}};
  for (const auto& [args, message] : refused) {
    const CliResult r = run_hone(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.err;
    EXPECT_EQ(r.err, "hone: error: " + message + "\n") << args;
  }
  std::remove(file.c_str());
  // An empty path names nothing (was: the system's "cannot make absolute path").
  const CliResult empty = run_hone("convert " + std::string(HONE_SOURCE_DIR) + "/tests/reference/hf/gpt2 '' --to hone");
  EXPECT_EQ(empty.status, 2);
  EXPECT_EQ(empty.err, "hone: error: dest: an empty path names no file or folder (see hone convert --help)\n");
  // hone cp's too (was: copied into the working folder).
  const CliResult empty_cp = run_hone("cp quickstart ''");
  EXPECT_EQ(empty_cp.status, 2);
  EXPECT_EQ(empty_cp.err, "hone: error: dest: an empty path names no file or folder (see hone cp --help)\n");
}

// Another tool's config names no recipe: recipe= on the command line names it.
TEST(Cli, ARecipeOnTheCommandLineNamesItForAConfigWithout) {
  const std::string file = testing::TempDir() + "hone_no_recipe_" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(file) << "output_dir: /tmp/x\nmodel: {name: llama_tiny}\ndataset: {seq_len: 16}\nmax_steps: 1\n";
  const CliResult without = run_hone("validate " + file);
  EXPECT_EQ(without.status, 2);
  EXPECT_NE(without.err.find("the config names no recipe: add 'recipe: NAME', or recipe=NAME (pretrain, "
                             "full_finetune, lora_finetune, lora_dpo, full_dpo, generate, eval)\n"),
            std::string::npos)
      << without.err;
  const CliResult with = run_hone("validate " + file + " recipe=pretrain");
  EXPECT_EQ(with.status, 0) << with.err;
  // A torchtune config names its model builder and loss: the recipe they are for is said.
  for (const auto& [components, recipe] : std::vector<std::pair<std::string, std::string>>{
           {"model: {_component_: torchtune.models.llama3_2.lora_llama3_2_1b}\n", "lora_finetune"},
           {"model: {_component_: torchtune.models.llama3_2.llama3_2_1b}\ncheckpointer: {checkpoint_dir: x}\n",
            "full_finetune"},
           {"model: {_component_: torchtune.models.llama2.lora_llama2_7b}\nloss: {_component_: "
            "torchtune.rlhf.loss.DPOLoss}\n",
            "lora_dpo"}}) {
    std::ofstream(file) << components;
    const CliResult torchtune = run_hone("validate " + file);
    EXPECT_EQ(torchtune.status, 2);
    EXPECT_NE(torchtune.err.find("; by its components, a torchtune config for " + recipe + "\n"), std::string::npos)
        << torchtune.err;
  }
  // torchtune's single-device and distributed config names: the one config here.
  const CliResult single = run_hone("validate --config llama3_2/1B_lora_single_device");
  EXPECT_EQ(single.status, 2);
  EXPECT_NE(single.err.find("torchtune's single-device and distributed configs are one here, 'llama3_2/1B_lora'"),
            std::string::npos)
      << single.err;
  std::remove(file.c_str());
}

TEST(Cli, ValidateAndPlanTakeTheirConfigAsHoneRunDoesToo) {
  const CliResult positional = run_hone("validate quickstart max_steps=7 optimizer.lr=0.002");
  ASSERT_EQ(positional.status, 0) << positional.err;
  EXPECT_NE(positional.out.find("max_steps: 7\n"), std::string::npos) << positional.out;
  for (const char* args : {"validate --config quickstart max_steps=7 optimizer.lr=0.002",
                           "validate max_steps=7 -c quickstart optimizer.lr=0.002"}) {
    const CliResult v = run_hone(args);
    EXPECT_EQ(v.status, 0) << args << ": " << v.err;
    EXPECT_EQ(v.out, positional.out) << args;
  }
  // A recipe where the config goes, as hone run takes it.
  const CliResult recipe = run_hone("validate pretrain --config quickstart max_steps=7");
  EXPECT_EQ(recipe.status, 0) << recipe.err;
  EXPECT_NE(recipe.out.find("\nmax_steps: 7\n"), std::string::npos) << recipe.out;
  EXPECT_EQ(run_hone("validate pretrain model.name=gpt2_124M max_steps=7 output_dir=runs/x dataset.seq_len=64").status,
            0);
  EXPECT_NE(run_hone("validate lora_finetune --config quickstart").err.find(
                "quickstart.yaml:3: a config for the pretrain recipe, run with lora_finetune\n"),
            std::string::npos);
  // GPT-2's heads each have their keys and values, with nanoGPT's n_head=6 too; Llama's GQA keeps its groups.
  const CliResult heads = run_hone("validate gpt2/124M_pretrain model.n_heads=6 model.dim=384");
  EXPECT_NE(heads.out.find("# model: gpt2_124M with dim 384, n_heads 6 (gpt2 family), 55.2M parameters"),
            std::string::npos)
      << heads.err;
  EXPECT_NE(run_hone("validate llama3_2/1B_pretrain model.n_heads=6 model.dim=384")
                .err.find("model.n_heads 6 is not a multiple of model.n_kv_heads 8"),
            std::string::npos);
  // A value outside its range is caught before any run starts.
  const CliResult zero = run_hone("validate quickstart batch_size=0");
  EXPECT_EQ(zero.status, 2);
  EXPECT_NE(zero.err.find("'batch_size' must be in [1, 1048576], got 0"), std::string::npos) << zero.err;
  // lora_dpo's loss keys: the loss it runs, and a setting it would ignore refused.
  const CliResult ipo = run_hone("validate llama3_1/8B_lora_dpo loss.type=ipo");
  EXPECT_EQ(ipo.status, 0) << ipo.err;
  EXPECT_NE(ipo.out.find("# IPO: tau (beta) 0.1; the reference model is the base"), std::string::npos) << ipo.out;
  const CliResult gamma = run_hone("validate llama3_1/8B_lora_dpo loss.type=rso loss.gamma=1");
  EXPECT_EQ(gamma.status, 2);
  EXPECT_NE(gamma.err.find("loss.gamma is for loss.type simpo; this run's loss.type is rso"), std::string::npos)
      << gamma.err;
  // An export folder that is there already: what hone run would refuse now, as a note.
  const std::string taken = testing::TempDir() + "/hone_cli_taken_export";
  std::filesystem::create_directories(taken);
  std::ofstream(taken + "/config.json") << "{}";
  const CliResult exported = run_hone("validate llama3_2/1B_lora export.hf=" + taken);
  EXPECT_EQ(exported.status, 0) << exported.err;
  EXPECT_NE(exported.out.find("# note: hone run would refuse this now: export.hf " + taken + ": already exists"),
            std::string::npos)
      << exported.out;
  std::filesystem::remove_all(taken);
  const CliResult none = run_hone("validate");
  EXPECT_EQ(none.status, 2);
  EXPECT_NE(none.err.find("which config?"), std::string::npos) << none.err;
  const CliResult plan = run_hone("plan llama3_1/8B_pretrain --world-size 16 batch_size=2");
  ASSERT_EQ(plan.status, 0) << plan.err;
  EXPECT_NE(plan.out.find("2 x 8192 tokens per micro-batch"), std::string::npos) << plan.out;
  EXPECT_EQ(run_hone("plan --world-size 16 -c llama3_1/8B_pretrain batch_size=2").out, plan.out);
}

// Under a launcher each process would generate or evaluate everything, into the
// same files: refused, before anything is read.
TEST(Cli, GenerateAndEvalRunAsOneProcess) {
  const std::string torchrun = "RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 "
                               "MASTER_PORT=29500";
  for (const std::string recipe : {"generate", "eval"}) {
    const std::string input = recipe == "generate" ? "prompt=x" : "task.path=/no/such/task.jsonl";
    const CliResult r = run_hone("run " + recipe + " checkpoint.path=/no/such/model " + input, torchrun);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(r.err, "hone: error: hone run " + recipe + " runs as one process, and hone launch (or torchrun) started "
                     "2 (this is rank 1): each would do the whole work and write the same files; run it without a "
                     "launcher\n");
  }
}

TEST(Cli, UserErrorsExitWithStatus2AndOneLine) {
  for (const char* args : {"bench --model no_such_model", "bench --dtype fp8", "bench --steps 0",
                           "bench --seq-len 100000", "bench --batch-size"}) {
    CliResult r = run_hone(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_FALSE(r.err.empty()) << args;
  }
  // Numbers out of range, and a config hone run would refuse: one line, nothing printed first.
  const std::pair<std::string, std::string> refused[] = {
      {"bench --threads -2 --steps 1", "--threads: Value -2 not in range 0 to 4096"},
      {"bench --seq-len 0", "--seq-len: expected a positive whole number, got 0"},
      {"bench --max-seq-len -5", "--max-seq-len: expected a positive whole number, got -5"},
      {"bench --dtype bf17", "--dtype: bf17 not in {fp32,bf16}"},
      {"bench --max-seq-len 16 --seq-len 32", "--seq-len 32 is longer than --max-seq-len 16"},
      {"plan quickstart --world-size 8 --tokens -5", "--tokens: expected a positive number, got -5"},
      {"plan quickstart --world-size -4", "--world-size: expected a positive whole number, got -4"},
      // Past a double's range is no number, not infinity.
      {"plan quickstart --world-size 8 --memory-gb 1e400", "--memory-gb: expected a positive number, got 1e400"},
      {"plan quickstart --world-size 8 --link-gbps nan", "--link-gbps: expected a positive number, got nan"},
      {"plan quickstart --world-size 8 --mfu 2", "--mfu is a fraction of the peak: at most 1, got 2"},
      {"validate quickstart epochs=1", "configs/quickstart.yaml with epochs from the command line: give exactly one of "
                                       "max_steps, epochs and max_tokens (got max_steps, epochs): "
                                       "add max_steps=null to drop the config's"},
      {"validate quickstart max_steps=null", "configs/quickstart.yaml with max_steps=null from the command line: give "
                                             "exactly one of max_steps, epochs and max_tokens (got none)"},
      {"validate pretrain --config quickstart recipe=eval", "the command line: a config for the eval recipe, run with "
                                                             "pretrain"},
      {"comm-bench --dtype fp16", "--dtype must be f32, bf16 or f64, got 'fp16'"},
      {"launch --nproc-per-node 2 --nnodes 0 -- true", "--nnodes must be at least 1, got 0"},
      {"comm-bench --dtype int8", "--dtype must be f32, bf16 or f64, got 'int8'"},
      {"validate llama3_2/1B_lora model.lora_attn_modules=[q_proj,o_proj]",
       "with model.lora_attn_modules from the command line: model.lora_attn_modules: 'o_proj' is a Hugging Face "
       "module name (PEFT's target_modules); hone takes torchtune's: output_proj instead"},
      {"validate llama3_2/1B_lora clip_grad_norm=1.0", "'clip_grad_norm': torchtune's; hone's is optimizer.max_grad_norm"},
      {"validate llama3_2/1B_lora shuffle=False", "'shuffle': torchtune's; hone's is dataset.shuffle"},
      {"validate llama3_2/1B_lora lora_alpha=16", "'lora_alpha': torchtune's model.lora_alpha is hone's too"},
      {"validate llama3_2/1B_lora model.quantize_base=True", "'model.quantize_base': torchtune's QLoRA (a 4-bit NF4 "
                                                             "base); hone's LoRA keeps the base in dtype"},
      {"validate llama3_2/1B_lora profiler.enabled=False", "'profiler': torchtune's; HONE_PROFILE=1"},
      // The dataset keys' errors, which hone run gives before reading any data.
      {"validate llama3_2/1B_lora dataset.column_map.outptu=answer",
       "the command line: dataset.column_map.outptu: no template reads a field 'outptu' (did you mean 'output'?)"},
      {"validate gpt2/124M_lora dataset.system_prompt=Brief.",
       "dataset.system_prompt is a chat format's system message: the alpaca template writes plain text"},
      {"validate quickstart dataset.type=mock", "dataset.path .assets/quickstart/sotu_text_document is set but "
                                                "dataset.type is mock, which ignores it"},
      {"validate quickstart dataset.type=mds dataset.path=null", "dataset.type mds needs dataset.path"},
      // Refused by hone run after loading the model before: the config alone tells.
      {"validate llama3_2/1B_lora export.hf=x/e export.peft=x/e/peft",
       "export.peft x/e/peft and export.hf x/e overlap: give each a folder of its own"},
      {"validate quickstart model.n_heads=7", "with model.n_heads from the command line: model 'llama_tiny': "
                                              "model.dim 256 is not a multiple of model.n_heads 7"},
      {"validate llama3_1/8B_lora_dpo dataset.packed=true",
       "the command line: DPO's pairs are not packed (dataset.packed)"},
      {"validate quickstart optimizer.betas=[0.9]", "the command line: optimizer.betas must hold two numbers, got 1"},
      {"validate quickstart model.name=llama_tinyy", "'model.name' is 'llama_tinyy'; expected one of "},
      {"validate " + testing::TempDir(), testing::TempDir() + ": a folder, not a config file"},
      {"plan llama_tiny --world-size 2", "'llama_tiny' is a built-in model, not a config: give a config (hone ls "
                                         "lists them), or the model to a recipe as model.name=llama_tiny"},
      {"launch --nproc-per-node 1 -- /no/such/command", "/no/such/command: no such command (not a file, nor on PATH)"},
      {"ls llama3_2/1B_lora", "'llama3_2/1B_lora' is a built-in config of the lora_finetune recipe, not a recipe: "
                              "hone ls lora_finetune lists that recipe's keys, hone cp llama3_2/1B_lora FILE copies it"},
      {"ls llama_tiny", "'llama_tiny' is a built-in model, not a recipe: a recipe takes it as model.name=llama_tiny"}};
  // hone validate refuses the eval and generate configs hone run would refuse before reading any file.
  std::ofstream(testing::TempDir() + "/shots.yaml") << "recipe: eval\ncheckpoint: {path: m}\ntask: {path: t.jsonl, num_fewshot: 3}\n";
  std::ofstream(testing::TempDir() + "/no_prompt.yaml") << "recipe: generate\ncheckpoint: {path: m}\n";
  std::ofstream(testing::TempDir() + "/tasks.yaml") << "recipe: eval\ncheckpoint: {path: m}\ntasks: {arc: {path: a.jsonl}}\n";
  const std::pair<std::string, std::string> refused_by_validate[] = {
      {"validate " + testing::TempDir() + "/tasks.yaml tasks.arc.bogus=5",
       "tasks.yaml with tasks.arc.bogus from the command line: unknown key 'tasks.arc.bogus'"},
      {"validate " + testing::TempDir() + "/tasks.yaml ~checkpoint.path",
       "the command line: 'checkpoint.path' is required"},
      {"validate " + testing::TempDir() + "/shots.yaml", "task.num_fewshot (> 0) and task.fewshot_path go together"},
      {"validate " + testing::TempDir() + "/no_prompt.yaml", "give a prompt or a prompts_file"},
      // A built-in config's example prompt beside a prompts_file from the command line.
      {"validate generation prompts_file=p.txt",
       "give prompt or prompts_file, not both (add prompt=null to drop configs/generation.yaml's prompt)"},
      {"validate eleuther_evaluation task.path=t.jsonl",
       "give task.path (one task) or tasks (several), not both (add tasks=null to drop "
       "configs/eleuther_evaluation.yaml's tasks)"}};
  for (const auto& [args, message] : refused_by_validate) {
    const CliResult r = run_hone(args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << ": " << r.err;
  }
  for (const auto& [args, message] : refused) {
    const CliResult r = run_hone(args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_EQ(r.out, "") << args;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
  // HONE_MPIRUN naming nothing runnable is named (empty, it ran a folder on PATH: status 127).
  for (const std::string mpirun : {"", "/no/such/mpirun", "/tmp"}) {
    ::setenv("HONE_MPIRUN", mpirun.c_str(), 1);
    const CliResult r = run_hone("launch --nproc-per-node 2 -- hone run pretrain -c quickstart");
    ::unsetenv("HONE_MPIRUN");
    EXPECT_EQ(r.status, 2) << mpirun;
    EXPECT_NE(r.err.find("HONE_MPIRUN='" + mpirun + "' names no program to run"), std::string::npos) << r.err;
  }
  const CliResult too_long = run_hone("bench --model llama_tiny --seq-len 300 --steps 1");
  EXPECT_EQ(too_long.status, 2);
  EXPECT_NE(too_long.err.find("--seq-len 300 is longer than llama_tiny's max_seq_len 256: raise it with --max-seq-len"),
            std::string::npos)
      << too_long.err;
  // Without a config file, the keys come from the command line, which says so.
  const CliResult no_model = run_hone("run generate prompt=hi");
  EXPECT_EQ(no_model.status, 2);
  EXPECT_EQ(no_model.err.find("hone: error: the command line: 'checkpoint.path' is required"), 0u) << no_model.err;
  CliResult r = run_hone("bench --model no_such_model");
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("llama_tiny"), std::string::npos) << "the error should list the valid names: " << r.err;
}

}  // namespace
}  // namespace hone::test
