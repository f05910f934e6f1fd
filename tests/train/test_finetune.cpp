// The fine-tuning recipes end to end: a base model pretrained by hone, LoRA and
// full fine-tuning on an instruct dataset, exact resume, PEFT and HF exports.
#include <signal.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "data/tokenizers/assets.hpp"
#include "hone/data/instruct.hpp"
#include "hone/io/checkpoint.hpp"
#include "hone/io/convert.hpp"
#include "hone/io/safetensors.hpp"
#include "hone/train/eval_task.hpp"
#include "run_hone.hpp"
#include "support/check.hpp"
#include "support/mds_fixture.hpp"

namespace hone::test {
namespace {

namespace fs = std::filesystem;

class FinetuneRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = testing::TempDir() + "hone_finetune_" + std::to_string(::getpid());
    fs::remove_all(root_);
    fs::create_directories(root_);
    tokenizer_ = asset_path("tokenizers/gpt2-hf");  // the Hugging Face layout, copied into HF exports
    // The base: a small Llama with GPT-2's vocabulary, a few pretraining steps on mock data.
    ASSERT_EQ(run_hone_to_log({"run", "pretrain", "output_dir=" + root_ + "/base", "threads=1",
                               "model.name=llama_tiny", "model.vocab_size=50257", "model.max_seq_len=128",
                               "dataset.seq_len=64", "max_steps=2", "logging.tensorboard=false",
                               "tokenizer.path=" + tokenizer_},
                              root_ + "/base.log"),
              0)
        << read_file(root_ + "/base.log");
    // Learnable records: the answer repeats a word of the instruction.
    std::ofstream out(root_ + "/data.jsonl");
    const char* words[] = {"apple", "river", "stone", "cloud", "green", "piano", "tiger", "maple"};
    for (int i = 0; i < 48; ++i) {
      out << "{\"instruction\": \"Repeat the word " << words[i % 8] << ".\", \"output\": \"" << words[i % 8]
          << "\"}\n";
    }
    // Preference pairs on the same task: the word repeated is chosen over a refusal.
    std::ofstream pairs(root_ + "/pairs.jsonl");
    for (int i = 0; i < 48; ++i) {
      pairs << "{\"prompt\": \"Repeat the word " << words[i % 8] << ".\", \"chosen\": \"" << words[i % 8]
            << "\", \"rejected\": \"nothing\"}\n";
    }
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  std::vector<std::string> lora_args(const std::string& run, int64_t steps) {
    return {"run", "lora_finetune", "output_dir=" + root_ + "/" + run, "threads=1",
            "checkpoint.path=" + root_ + "/base", "tokenizer.path=" + tokenizer_,
            "dataset.path=" + root_ + "/data.jsonl", "dataset.max_seq_len=64", "batch_size=4",
            "max_steps=" + std::to_string(steps), "optimizer.lr=1e-2", "model.lora_rank=4",
            // On a barely trained base the output adapter does most of the learning.
            "model.lora_attn_modules=[q_proj, k_proj, v_proj, output_proj]", "model.apply_lora_to_mlp=true",
            "model.apply_lora_to_output=true", "eval.max_batches=2", "log_every_n_steps=1",
            "logging.tensorboard=false", "checkpoint.keep_last_n=0"};
  }

  // lora_dpo on the preference pairs, rows cut to multiples of 8 tokens.
  std::vector<std::string> dpo_args(const std::string& run, int64_t steps) {
    return {"run", "lora_dpo", "output_dir=" + root_ + "/" + run, "threads=1", "checkpoint.path=" + root_ + "/base",
            "tokenizer.path=" + tokenizer_, "dataset.path=" + root_ + "/pairs.jsonl", "dataset.template=plain",
            "dataset.max_seq_len=32", "dataset.pad_to_multiple_of=8", "batch_size=4",
            "max_steps=" + std::to_string(steps), "optimizer.lr=1e-2", "model.lora_rank=4",
            "model.lora_attn_modules=[q_proj, k_proj, v_proj, output_proj]", "model.apply_lora_to_mlp=true",
            "model.apply_lora_to_output=true", "eval.max_batches=2", "log_every_n_steps=1",
            "logging.tensorboard=false", "checkpoint.keep_last_n=0"};
  }

  // full_dpo on the same pairs: every weight trained, against a frozen copy.
  std::vector<std::string> full_dpo_args(const std::string& run, int64_t steps) {
    std::vector<std::string> args = dpo_args(run, steps);
    std::erase_if(args, [](const std::string& a) { return a.starts_with("model.lora") || a.starts_with("model.apply_lora"); });
    args[1] = "full_dpo";
    std::replace(args.begin(), args.end(), std::string("optimizer.lr=1e-2"), std::string("optimizer.lr=1e-3"));
    return args;
  }

  // The LoRA run with its exports, trained once per test process (ctest runs
  // every test in a process of its own).
  std::string trained_lora_run() {
    const std::string run = root_ + "/lora";
    if (!fs::exists(run + "/latest")) {
      auto args = lora_args("lora", 30);
      args.push_back("export.peft=" + root_ + "/peft");
      args.push_back("export.hf=" + root_ + "/hf");
      EXPECT_EQ(run_hone_to_log(args, root_ + "/lora.log"), 0) << read_file(root_ + "/lora.log");
    }
    return run;
  }

  // The loss `hone run eval` reports on instruct records cut to 64 tokens; `args` name the model and data.
  double instruct_eval_loss(const std::vector<std::string>& args) {
    std::vector<std::string> all = {"run", "eval", "threads=1", "dataset.type=instruct", "dataset.seq_len=64"};
    all.insert(all.end(), args.begin(), args.end());
    const std::string out = root_ + "/instruct_eval.out";
    std::remove(out.c_str());  // the log is appended to
    EXPECT_EQ(run_hone_to_log(all, out), 0) << read_file(out);
    const std::string text = read_file(out);
    return nlohmann::json::parse(text.substr(text.rfind('{')))["loss"].get<double>();
  }

  // `hone <args>` exits with status 2, its log (NAME.log) holding `message`.
  void expect_refused(const std::vector<std::string>& args, const std::string& name, const std::string& message) {
    const std::string log = root_ + "/" + name + ".log";
    EXPECT_EQ(run_hone_to_log(args, log), 2) << read_file(log);
    EXPECT_NE(read_file(log).find(message), std::string::npos) << read_file(log);
  }

  // The train losses of a run, by step.
  std::map<int64_t, double> losses(const std::string& run) { return run_metric(root_ + "/" + run, "loss/train/total"); }

  // `hone <args>` as a job of 2 ranks under hone launch.
  static std::vector<std::string> on_two_ranks(std::vector<std::string> args) {
    args.insert(args.begin(), {"launch", "--nproc-per-node", "2", "--", std::string(HONE_BINARY_DIR) + "/bin/hone"});
    return args;
  }

  // Every step of `run` (there are `steps`) lost what the same step of `want`
  // did, to 5e-5 relative. The runs add the same products in another order, so
  // their gradients differ in the last place, and AdamW at lr 1e-2 makes such
  // differences grow step by step: it scales each gradient element by its own
  // size, so rounding noise in near-zero elements becomes a full-size update.
  // On an AMX Xeon two ranks at ZeRO 2 against one process accumulating were
  // 0, 3e-8, 8e-7, 2.5e-6, 2.4e-6 and 4e-6 apart at steps 1-6; one process
  // that dropped half of each step's samples (the size of a lost rank) was
  // 2.4e-3 apart at step 1 and 3.5e-3 to 6e-2 after.
  void expect_losses_of(const std::string& run, const std::map<int64_t, double>& want, size_t steps) {
    const auto got = losses(run);
    ASSERT_EQ(got.size(), steps) << run;
    for (const auto& [step, loss] : got) {
      EXPECT_NEAR(loss, want.at(step), 5e-5 * std::abs(want.at(step))) << run << " step " << step;
    }
  }

  // A run of 12 steps (args(run, steps) names it), and one resumed from its
  // step-5 checkpoint: the same losses and the same adapters at the end.
  void expect_resume_reproduces_the_run(
      const std::function<std::vector<std::string>(const std::string&, int64_t)>& args, const std::string& name) {
    auto full = args(name + "_full", 12);
    full.push_back("checkpoint.every_n_steps=5");
    ASSERT_EQ(run_hone_to_log(full, root_ + "/" + name + "_full.log"), 0) << read_file(root_ + "/" + name + "_full.log");
    fs::create_directories(root_ + "/" + name + "_resumed");
    fs::copy(root_ + "/" + name + "_full/step_0000005", root_ + "/" + name + "_resumed/step_0000005");
    std::ofstream(root_ + "/" + name + "_resumed/latest") << "step_0000005\n";
    auto resumed = args(name + "_resumed", 12);
    resumed.push_back("checkpoint.every_n_steps=5");
    resumed.push_back("resume=latest");
    ASSERT_EQ(run_hone_to_log(resumed, root_ + "/" + name + "_resumed.log"), 0)
        << read_file(root_ + "/" + name + "_resumed.log");
    // The steps after 5, each with the same loss, and no other.
    const auto a = losses(name + "_full"), b = losses(name + "_resumed");
    ASSERT_GT(a.rbegin()->first, 5) << read_file(root_ + "/" + name + "_full.log");
    EXPECT_EQ(b, (std::map<int64_t, double>(a.upper_bound(5), a.end())));
    // The trained tensors: LoRA's adapters, or the whole model's weights.
    const std::string last = checkpoint_folder_name(a.rbegin()->first);
    const std::string file = fs::exists(root_ + "/" + name + "_full/" + last + "/adapter.safetensors")
                                 ? "adapter.safetensors"
                                 : "model.safetensors";
    SafetensorsFile x(root_ + "/" + name + "_full/" + last + "/" + file);
    SafetensorsFile y(root_ + "/" + name + "_resumed/" + last + "/" + file);
    for (const std::string& t : x.names()) EXPECT_EQ(x.load(t).to_vector<float>(), y.load(t).to_vector<float>());
  }

  // `args` (fp32, 2 pairs a micro-batch) run as one process accumulating two
  // micro-batches and as two ranks at ZeRO stage 3: the same losses.
  void expect_two_ranks_like_one_accumulating(
      const std::function<std::vector<std::string>(const std::string&, int64_t)>& args, const std::string& name,
      const std::vector<std::string>& extra) {
    auto one = args(name + "_one", 4), two = args(name + "_two", 4);
    for (auto* a : {&one, &two}) {
      a->insert(a->end(), {"dtype=fp32", "batch_size=2"});
      a->insert(a->end(), extra.begin(), extra.end());
    }
    one.push_back("gradient_accumulation_steps=2");
    two.push_back("distributed.zero=3");
    two = on_two_ranks(two);
    ASSERT_EQ(run_hone_to_log(one, root_ + "/" + name + "_one.log"), 0) << read_file(root_ + "/" + name + "_one.log");
    ASSERT_EQ(run_hone_to_log(two, root_ + "/" + name + "_two.log"), 0) << read_file(root_ + "/" + name + "_two.log");
    expect_losses_of(name + "_two", losses(name + "_one"), 4);
  }

  static std::string root_, tokenizer_;
};
std::string FinetuneRun::root_, FinetuneRun::tokenizer_;

TEST_F(FinetuneRun, LoraLearnsSavesAdaptersAndExportsPeftAndHf) {
  trained_lora_run();
  const auto l = losses("lora");
  EXPECT_LT(l.at(30), l.at(1) - 3.0) << read_file(root_ + "/lora.log");
  // The checkpoint holds the adapters, not a second copy of the frozen base.
  EXPECT_TRUE(fs::exists(root_ + "/lora/step_0000030/adapter.safetensors"));
  EXPECT_FALSE(fs::exists(root_ + "/lora/step_0000030/model.safetensors"));
  // PEFT: its config and tensor names.
  const auto config = nlohmann::json::parse(read_file(root_ + "/peft/adapter_config.json"));
  EXPECT_EQ(config["peft_type"], "LORA");
  EXPECT_EQ(config["r"], 4);
  // The base is a hone run, which PEFT cannot load: the run says so, and how to make one it can.
  EXPECT_EQ(config["base_model_name_or_path"], root_ + "/base");
  EXPECT_NE(read_file(root_ + "/lora.log")
                .find("note: the adapter's base_model_name_or_path, " + root_ + "/base, is no Hugging Face model: give "
                      "PEFT the base as one (hone convert " + root_ + "/base DIR --to hf)"),
            std::string::npos)
      << read_file(root_ + "/lora.log");
  EXPECT_EQ(config["target_modules"], nlohmann::json::array({"down_proj", "gate_proj", "k_proj", "lm_head", "o_proj",
                                                             "q_proj", "up_proj", "v_proj"}));
  SafetensorsFile adapters(root_ + "/peft/adapter_model.safetensors");
  EXPECT_TRUE(adapters.contains("base_model.model.lm_head.lora_A.weight"));
  EXPECT_TRUE(adapters.contains("base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"));
  EXPECT_EQ(adapters.entry("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight").shape, Shape({4, 64}));
  // The merged Hugging Face export is a complete Llama with the tokenizer beside it.
  EXPECT_TRUE(fs::exists(root_ + "/hf/config.json"));
  EXPECT_TRUE(fs::exists(root_ + "/hf/vocab.json") || fs::exists(root_ + "/hf/encoder.json"));
  EXPECT_EQ(open_weights(root_ + "/hf")->config().vocab_size, 50257);
  // With GPT-2's <|endoftext|> as BOS and EOS, not LlamaConfig's defaults (1 and 2).
  for (const char* file : {"config.json", "generation_config.json"}) {
    const auto written = nlohmann::json::parse(read_file(root_ + "/hf/" + file));
    EXPECT_EQ(written["bos_token_id"], 50256) << file;
    EXPECT_EQ(written["eos_token_id"], 50256) << file;
  }
}

// An adapter edited to another shape of as many elements (a transposed B) is
// named when merged, as loading it to train is (was: merged silently).
TEST_F(FinetuneRun, AnAdapterOfAnotherShapeIsNotMerged) {
  trained_lora_run();
  const std::string edited = root_ + "/lora_transposed";
  fs::remove_all(edited);
  fs::copy(root_ + "/lora/step_0000030", edited, fs::copy_options::recursive);
  const std::string file = edited + "/adapter.safetensors";
  std::vector<NamedTensor> tensors;
  {
    const SafetensorsFile f(file);
    for (const std::string& name : f.names()) tensors.push_back({name, f.load(name)});
  }
  for (NamedTensor& t : tensors) {
    if (t.name == "layers.1.lora.v_proj.b") t.tensor = t.tensor.clone().view({t.tensor.size(1), t.tensor.size(0)});
  }
  fs::remove(file);
  write_safetensors(file, tensors);
  nlohmann::json manifest = nlohmann::json::parse(read_file(edited + "/manifest.json"));
  manifest["files"]["adapter.safetensors"] = {{"bytes", fs::file_size(file)},
                                              {"xxh3_64", checksum_hex(file_checksum(file))}};
  std::ofstream(edited + "/manifest.json") << manifest.dump();
  const std::string out = root_ + "/lora_transposed.log";
  EXPECT_EQ(run_hone_to_log({"convert", edited, root_ + "/lora_transposed_hf", "--to", "hf"}, out), 2) << read_file(out);
  EXPECT_NE(read_file(out).find("'layers.1.lora.v_proj.b' is [4, 32], where LoRA of rank 4 on layers.1.attn.qkv.weight "
                                "needs [32, 4]"),
            std::string::npos)
      << read_file(out);
  EXPECT_FALSE(fs::exists(root_ + "/lora_transposed_hf"));
}

// Exports that would fail once the run has trained (a folder in the way) fail
// before it starts: nothing is trained or written.
TEST_F(FinetuneRun, ExportsThatWouldFailAreRefusedBeforeTraining) {
  const std::string taken = root_ + "/taken_export";
  fs::create_directories(taken);
  std::ofstream(taken + "/keep.txt") << "x";
  for (const char* key : {"export.hf=", "export.peft="}) {
    auto args = lora_args("refused_export", 2);
    args.push_back(key + taken);
    EXPECT_EQ(run_hone_to_log(args, root_ + "/refused_export.log"), 2);
    EXPECT_NE(read_file(root_ + "/refused_export.log").find(taken + ": already exists; give a new folder"),
              std::string::npos)
        << read_file(root_ + "/refused_export.log");
    EXPECT_FALSE(fs::exists(root_ + "/refused_export")) << key;
  }
  // A folder that cannot be made (under a file), and the two exports in one folder.
  const std::pair<std::vector<std::string>, std::string> refused[] = {
      {{"export.hf=" + taken + "/keep.txt/hf"}, taken + "/keep.txt/hf: cannot create the folder: Not a directory"},
      {{"export.hf=" + root_ + "/both", "export.peft=" + root_ + "/both/"}, "export.peft " + root_ +
                                                                                "/both/ and export.hf " + root_ +
                                                                                "/both overlap"},
      {{"export.hf=" + root_ + "/both", "export.peft=" + root_ + "/both/peft"}, "overlap: give each a folder"},
      // The run's own folder and its checkpoints' (found after training, before).
      {{"export.hf=" + root_ + "/refused_export"}, "export.hf " + root_ + "/refused_export is the run's own folder"},
      {{"export.peft=" + root_ + "/refused_export/step_0000002"}, "is the run's own folder (output_dir"}};
  for (const auto& [exports, message] : refused) {
    auto args = lora_args("refused_export", 2);
    args.insert(args.end(), exports.begin(), exports.end());
    EXPECT_EQ(run_hone_to_log(args, root_ + "/refused_export.log"), 2);
    EXPECT_NE(read_file(root_ + "/refused_export.log").find(message), std::string::npos)
        << read_file(root_ + "/refused_export.log");
    EXPECT_FALSE(fs::exists(root_ + "/refused_export")) << message;
    EXPECT_FALSE(fs::exists(root_ + "/both"));
  }
}

// generate's stop strings (vLLM's stop) end a completion, printed up to the first.
TEST_F(FinetuneRun, GenerateEndsACompletionAtAStopString) {
  const auto completion = [&](const std::string& stop) {
    std::vector<std::string> args = {"run", "generate", "threads=1", "checkpoint.path=" + root_ + "/base",
                                     "tokenizer.path=" + tokenizer_, "prompt=Repeat the word tiger.",
                                     "temperature=0", "max_new_tokens=12"};
    if (!stop.empty()) args.push_back("stop=[\"" + stop + "\"]");
    const std::string out = root_ + "/stop.out";
    std::remove(out.c_str());
    EXPECT_EQ(run_hone_to_log(args, out), 0) << read_file(out);
    const std::string text = read_file(out);
    const size_t start = text.find("Repeat the word tiger.\n") + std::string("Repeat the word tiger.\n").size();
    return text.substr(start, text.find('\n', start) - start);
  };
  const std::string whole = completion("");
  const auto letter = std::find_if(whole.begin() + 1, whole.end(), [](char ch) { return std::isalpha(ch) != 0; });
  ASSERT_NE(letter, whole.end()) << "no letter after the first character to stop at: " << whole;
  const std::string stop(1, *letter);
  EXPECT_EQ(completion(stop), whole.substr(0, whole.find(stop))) << whole;
  // samples_path: each prompt and its completion as a line of JSON, the completion as printed.
  const std::string samples = root_ + "/generate_samples.jsonl";
  EXPECT_EQ(run_hone_to_log({"run", "generate", "threads=1", "checkpoint.path=" + root_ + "/base",
                             "tokenizer.path=" + tokenizer_, "prompt=Repeat the word tiger.", "temperature=0",
                             "max_new_tokens=12", "samples_path=" + samples},
                            root_ + "/generate_samples.out"),
            0);
  const nlohmann::json sample = nlohmann::json::parse(read_file(samples));
  EXPECT_EQ(sample["prompt"], "Repeat the word tiger.");
  EXPECT_EQ(sample["completion"], whole);
  EXPECT_GE(sample["tokens"], 1);
  EXPECT_LE(sample["tokens"], 12);
  // vLLM's finish_reason: length where max_new_tokens ended it, stop where a stop string did.
  EXPECT_EQ(sample["finish_reason"], sample["tokens"] == 12 ? "length" : "stop") << sample.dump();
  EXPECT_EQ(run_hone_to_log({"run", "generate", "threads=1", "checkpoint.path=" + root_ + "/base",
                             "tokenizer.path=" + tokenizer_, "prompt=Repeat the word tiger.", "temperature=0",
                             "max_new_tokens=12", "samples_path=" + samples, "stop=[\"" + stop + "\"]"},
                            root_ + "/generate_samples.out"),
            0);
  EXPECT_EQ(nlohmann::json::parse(read_file(samples))["finish_reason"], "stop");
  // An empty prompt generates from the end-of-text token (nanoGPT's unconditional samples).
  const std::string out = root_ + "/empty_prompt.out";
  EXPECT_EQ(run_hone_to_log({"run", "generate", "threads=1", "checkpoint.path=" + root_ + "/base",
                             "tokenizer.path=" + tokenizer_, "prompt=''", "max_new_tokens=4"},
                            out),
            0)
      << read_file(out);
  EXPECT_NE(read_file(out).find("decode: 4 tokens for 1 prompt, 3 of them decoded in "), std::string::npos)
      << read_file(out);
  // One new token comes with the prefill: no decoding step to time.
  EXPECT_EQ(run_hone_to_log({"run", "generate", "threads=1", "checkpoint.path=" + root_ + "/base",
                             "tokenizer.path=" + tokenizer_, "prompt=x", "max_new_tokens=1"},
                            out),
            0)
      << read_file(out);
  EXPECT_NE(read_file(out).find("decode: 1 token for 1 prompt, each from the prefill (no decoding step)"),
            std::string::npos)
      << read_file(out);
  EXPECT_NE(read_file(out).find("bandwidth achieved: n/a, no decoding step ("), std::string::npos) << read_file(out);
}

// num_samples (vLLM's n): that many completions of each prompt, each under
// "--- sample k" and in samples_path with its index; greedy ones are all the
// one completion, sampled ones are drawn anew (batch_size 4 splits a prompt's).
// A sampled completion is its prompt's and sample number's: the same alone in
// its batch and with num_samples 1.
TEST_F(FinetuneRun, GenerateDrawsNumSamplesCompletionsOfEachPrompt) {
  const std::string prompts = root_ + "/two_prompts.txt", samples = root_ + "/num_samples.jsonl";
  std::ofstream(prompts) << "Repeat the word tiger.\nName a color.\n";
  const auto generate = [&](const std::string& temperature, const std::string& prompts_arg,
                            const std::string& num_samples = "3", const std::string& batch_size = "4") {
    const std::string out = root_ + "/num_samples.out";
    EXPECT_EQ(run_hone_to_log({"run", "generate", "threads=1", "checkpoint.path=" + root_ + "/base",
                               "tokenizer.path=" + tokenizer_, prompts_arg, "temperature=" + temperature,
                               "max_new_tokens=6", "num_samples=" + num_samples, "batch_size=" + batch_size,
                               "samples_path=" + samples},
                              out),
              0)
        << read_file(out);
    std::vector<nlohmann::json> records;
    std::istringstream lines(read_file(samples));
    for (std::string line; std::getline(lines, line);) records.push_back(nlohmann::json::parse(line));
    return std::pair(read_file(out), records);
  };
  const auto [greedy_out, greedy] = generate("0", "prompt=Repeat the word tiger.");
  EXPECT_NE(greedy_out.find("Repeat the word tiger.\n--- sample 0\n"), std::string::npos) << greedy_out;
  EXPECT_NE(greedy_out.find("decode: 18 tokens for 1 prompt, 3 samples each, 15 of them decoded"), std::string::npos)
      << greedy_out;
  ASSERT_EQ(greedy.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(greedy[k]["sample"], k);
    EXPECT_EQ(greedy[k]["completion"], greedy[0]["completion"]);
  }
  const auto [sampled_out, sampled] = generate("1.5", "prompts_file=" + prompts);
  ASSERT_EQ(sampled.size(), 6u) << sampled_out;
  std::set<std::string> completions;
  for (size_t k = 0; k < 6; ++k) {
    EXPECT_EQ(sampled[k]["prompt"], k < 3 ? "Repeat the word tiger." : "Name a color.");
    EXPECT_EQ(sampled[k]["sample"], k % 3);
    completions.insert(sampled[k]["completion"].get<std::string>());
  }
  EXPECT_GE(completions.size(), 5u) << sampled_out;  // six draws of 6 tokens at temperature 1.5
  const auto [alone_out, alone] = generate("1.5", "prompts_file=" + prompts, "1", "1");
  ASSERT_EQ(alone.size(), 2u) << alone_out;
  EXPECT_EQ(alone[0]["completion"], sampled[0]["completion"]);
  EXPECT_EQ(alone[1]["completion"], sampled[3]["completion"]);
}

// hone convert --to peft writes any step's adapters as the run's export.peft
// wrote its last: the same tensors, the base the run trained on named.
TEST_F(FinetuneRun, ConvertWritesAnyStepsAdaptersAsPeft) {
  const std::string run = trained_lora_run();
  const std::string out = root_ + "/to_peft.log";
  ASSERT_EQ(run_hone_to_log({"convert", run, root_ + "/converted_peft", "--to", "peft"}, out), 0) << read_file(out);
  EXPECT_NE(read_file(out).find("the LoRA adapters of " + run + "/step_0000030 -> " + root_ + "/converted_peft"),
            std::string::npos)
      << read_file(out);
  const SafetensorsFile converted(root_ + "/converted_peft/adapter_model.safetensors"),
      exported(root_ + "/peft/adapter_model.safetensors");
  ASSERT_EQ(converted.names(), exported.names());
  for (const std::string& name : exported.names()) {
    EXPECT_EQ(converted.load(name).to_vector<float>(), exported.load(name).to_vector<float>()) << name;
  }
  const auto config = nlohmann::json::parse(read_file(root_ + "/converted_peft/adapter_config.json"));
  EXPECT_EQ(config["base_model_name_or_path"], root_ + "/base/step_0000002");
  EXPECT_EQ(config["r"], nlohmann::json::parse(read_file(root_ + "/peft/adapter_config.json"))["r"]);
  // A model is no LoRA run; options of a model's conversion do not apply.
  expect_refused({"convert", root_ + "/base", root_ + "/not_peft", "--to", "peft"}, "to_peft_base",
                 "--to peft takes a lora_finetune run or checkpoint folder");
  expect_refused({"convert", run, root_ + "/not_peft", "--to", "peft", "--dtype", "bf16"}, "to_peft_dtype",
                 "--dtype is for a model's conversion");
  EXPECT_FALSE(fs::exists(root_ + "/not_peft"));
}

// PEFT adapters given where they do not go, or incomplete, are named as such.
TEST_F(FinetuneRun, MisplacedPeftAdaptersAreNamedAsSuch) {
  trained_lora_run();
  const std::string peft = root_ + "/peft";
  fs::create_directories(root_ + "/peft_no_config");
  fs::copy_file(peft + "/adapter_model.safetensors", root_ + "/peft_no_config/adapter_model.safetensors",
                fs::copy_options::overwrite_existing);
  const std::vector<std::string> generate = {"run", "generate", "threads=1", "tokenizer.path=" + tokenizer_,
                                             "prompt=Repeat the word tiger.", "max_new_tokens=2"};
  const std::pair<std::vector<std::string>, std::string> refused[] = {
      {{"checkpoint.path=" + root_ + "/base", "lora.adapter=" + peft + "/adapter_model.safetensors"},
       peft + "/adapter_model.safetensors: a file; LoRA adapters are a folder"},
      {{"checkpoint.path=" + root_ + "/base", "lora.adapter=" + root_ + "/peft_no_config"},
       root_ + "/peft_no_config: PEFT adapter weights without adapter_config.json"},
      {{"checkpoint.path=" + peft}, peft + ": PEFT adapters, not a model: give them as lora.adapter"}};
  for (const auto& [extra, message] : refused) {
    auto args = generate;
    args.insert(args.end(), extra.begin(), extra.end());
    expect_refused(args, "misplaced_peft", message);
  }
}

// A full fine-tune keeps fp32 master weights; its export takes the base
// model's dtype (a bf16 model exported in fp32 doubles its files).
TEST_F(FinetuneRun, TheExportTakesTheBaseModelsDtype) {
  ASSERT_EQ(run_hone_to_log({"convert", root_ + "/base", root_ + "/base_bf16", "--to", "hf", "--dtype", "bf16"},
                            root_ + "/base_bf16.log"),
            0)
      << read_file(root_ + "/base_bf16.log");
  auto args = lora_args("full_bf16", 1);
  std::erase_if(args, [](const std::string& a) { return a.starts_with("model.lora") || a.starts_with("model.apply_lora"); });
  args[1] = "full_finetune";
  std::replace(args.begin(), args.end(), "checkpoint.path=" + root_ + "/base", "checkpoint.path=" + root_ + "/base_bf16");
  args.push_back("export.hf=" + root_ + "/full_bf16_hf");
  ASSERT_EQ(run_hone_to_log(args, root_ + "/full_bf16.log"), 0) << read_file(root_ + "/full_bf16.log");
  EXPECT_EQ(nlohmann::json::parse(read_file(root_ + "/full_bf16_hf/config.json"))["torch_dtype"], "bfloat16");
  SafetensorsFile exported(root_ + "/full_bf16_hf/model.safetensors");
  for (const std::string& name : exported.names()) EXPECT_EQ(exported.load(name).dtype(), DType::bf16) << name;
  // export.dtype says otherwise.
  args.back() = "export.hf=" + root_ + "/full_fp32_hf";
  args.push_back("export.dtype=fp32");
  std::replace(args.begin(), args.end(), "output_dir=" + root_ + "/full_bf16", "output_dir=" + root_ + "/full_fp32");
  ASSERT_EQ(run_hone_to_log(args, root_ + "/full_fp32.log"), 0) << read_file(root_ + "/full_fp32.log");
  EXPECT_EQ(nlohmann::json::parse(read_file(root_ + "/full_fp32_hf/config.json"))["torch_dtype"], "float32");
}

// Rows cut to the batch's longest sample (in multiples of 8 here) lose what
// rows of dataset.max_seq_len do: padding is after every sample, which attends
// only to what comes before it. (No dropout: its masks follow the row layout.)
TEST_F(FinetuneRun, BatchesCutToTheirLongestSampleLoseWhatWholeRowsDo) {
  auto cut = lora_args("cut", 3), whole = lora_args("whole", 3);
  cut.insert(cut.end(), {"dataset.pad_to_multiple_of=8", "model.lora_dropout=0"});
  whole.insert(whole.end(), {"dataset.pad_to_multiple_of=0", "model.lora_dropout=0"});
  ASSERT_EQ(run_hone_to_log(cut, root_ + "/cut.log"), 0) << read_file(root_ + "/cut.log");
  ASSERT_EQ(run_hone_to_log(whole, root_ + "/whole.log"), 0) << read_file(root_ + "/whole.log");
  EXPECT_NE(read_file(root_ + "/cut.log").find("batch: 4 x 64 tokens per micro-batch, 1 micro-batch per step (at most: "
                                               "each batch is cut to its longest sample, in multiples of 8 tokens)"),
            std::string::npos)
      << read_file(root_ + "/cut.log");
  EXPECT_EQ(read_file(root_ + "/whole.log").find("cut to its longest"), std::string::npos);
  // Unset, the multiple is 64 on the CPU, and 128 on a GPU (cuDNN's attention
  // takes multiples of 128), which leaves rows of 128 whole.
  std::ofstream(root_ + "/cut.yaml") << "recipe: lora_finetune\noutput_dir: " << root_ << "/unused\n"
                                     << "checkpoint: {path: " << root_ << "/base}\n"
                                     << "tokenizer: {path: " << tokenizer_ << "}\n"
                                     << "dataset: {path: " << root_ << "/data.jsonl, max_seq_len: 128}\n"
                                     << "epochs: 1\n";
  auto validated = [&](std::vector<std::string> overrides) {
    fs::remove(root_ + "/v.log");
    overrides.insert(overrides.begin(), {"validate", root_ + "/cut.yaml"});
    EXPECT_EQ(run_hone_to_log(overrides, root_ + "/v.log"), 0);
    return read_file(root_ + "/v.log");
  };
  EXPECT_NE(validated({"device=cpu"}).find("per step (at most: each batch is cut to its longest sample, in multiples "
                                            "of 64"),
            std::string::npos)
      << read_file(root_ + "/v.log");
  // Tensor parallelism splits the positions: rows of a multiple of tp.
  EXPECT_NE(validated({"distributed.tp=4", "dataset.pad_to_multiple_of=6"}).find("in multiples of 12 tokens"),
            std::string::npos)
      << read_file(root_ + "/v.log");
  const std::string on_gpu = validated({"device=cuda"});
  EXPECT_NE(on_gpu.find("x 128 tokens per micro-batch"), std::string::npos) << on_gpu;
  EXPECT_EQ(on_gpu.find("cut to"), std::string::npos) << on_gpu;
  expect_losses_of("cut", losses("whole"), 3);
  // Tokens are the samples' own, padding left out (Composer's count): per
  // sample, the same in both runs, below both row lengths.
  const auto sample_lengths = [&](const std::string& run) {
    std::vector<double> lengths;
    const auto tokens = run_metric(root_ + "/" + run, "throughput/tokens_per_sec");
    for (const auto& [step, samples] : run_metric(root_ + "/" + run, "throughput/samples_per_sec")) {
      lengths.push_back(tokens.at(step) / samples);
    }
    return lengths;
  };
  // The activations of rows of dataset.max_seq_len are held from the start
  // (their logits alone are 4 x 64 x 50257 floats, 51 MB of the 84).
  const double whole_memory = run_metric(root_ + "/whole", "memory/allocated_mem").at(1);
  EXPECT_NEAR(run_metric(root_ + "/cut", "memory/allocated_mem").at(1), whole_memory, 0.01 * whole_memory);
  const std::vector<double> whole_lengths = sample_lengths("whole"), cut_lengths = sample_lengths("cut");
  ASSERT_EQ(whole_lengths.size(), cut_lengths.size());
  for (size_t i = 0; i < whole_lengths.size(); ++i) {
    EXPECT_NEAR(cut_lengths[i], whole_lengths[i], 1e-6 * whole_lengths[i]) << i;
    EXPECT_LT(whole_lengths[i], 64.0) << i;
  }
  const auto validation = [&](const std::string& run) {
    return run_metric(root_ + "/" + run, "metrics/eval/LanguageCrossEntropy");
  };
  ASSERT_FALSE(validation("whole").empty());
  for (const auto& [step, loss] : validation("cut")) EXPECT_NEAR(loss, validation("whole").at(step), 1e-5 * loss);
}

// model.use_dora: the run learns its magnitudes too; its PEFT export carries
// them, and merged (the run's export.hf, or hone convert --adapter with the
// PEFT folder) they give the same weights, which evaluate as the adapters do.
TEST_F(FinetuneRun, DoraTrainsExportsAndMergesItsMagnitudes) {
  auto args = lora_args("dora", 12);
  args.insert(args.end(),
              {"model.use_dora=true", "export.peft=" + root_ + "/dora_peft", "export.hf=" + root_ + "/dora_hf"});
  ASSERT_EQ(run_hone_to_log(args, root_ + "/dora.log"), 0) << read_file(root_ + "/dora.log");
  const auto l = losses("dora");
  EXPECT_LT(l.at(12), l.at(1) - 1.0) << read_file(root_ + "/dora.log");
  EXPECT_NE(read_file(root_ + "/dora.log").find(" trained (DoRA rank 4)"), std::string::npos)
      << read_file(root_ + "/dora.log");
  EXPECT_EQ(nlohmann::json::parse(read_file(root_ + "/dora_peft/adapter_config.json"))["use_dora"], true);
  const SafetensorsFile peft(root_ + "/dora_peft/adapter_model.safetensors");
  EXPECT_EQ(peft.entry("base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector").shape, Shape({64}));

  // The run itself (its checkpoint says use_dora), and the base with its PEFT export, convert as export.hf wrote.
  const std::string log = root_ + "/dora_merged.log";
  const std::vector<std::vector<std::string>> conversions = {
      {"convert", root_ + "/dora", root_ + "/dora_merged_run", "--to", "hf"},
      {"convert", root_ + "/base", root_ + "/dora_merged_peft", "--to", "hf", "--adapter", root_ + "/dora_peft"}};
  for (const auto& convert : conversions) {
    ASSERT_EQ(run_hone_to_log(convert, log), 0) << read_file(log);
    const SafetensorsFile got(convert[2] + "/model.safetensors"), exported(root_ + "/dora_hf/model.safetensors");
    ASSERT_EQ(got.names(), exported.names());
    for (const std::string& name : got.names())
      EXPECT_EQ(got.load(name).to_vector<float>(), exported.load(name).to_vector<float>())
          << convert[2] << ": " << name;
  }
  const std::string data = "dataset.path=" + root_ + "/data.jsonl";
  EXPECT_NEAR(instruct_eval_loss({"checkpoint.path=" + root_ + "/dora_hf", data}),
              instruct_eval_loss({"checkpoint.path=" + root_ + "/base", "lora.adapter=" + root_ + "/dora_peft",
                                  "tokenizer.path=" + tokenizer_, data}),
              1e-5);
  // Starting from plain LoRA adapters is refused, naming the setting.
  auto from_lora = lora_args("dora_from_lora", 1);
  from_lora.insert(from_lora.end(), {"model.use_dora=true", "lora.adapter=" + trained_lora_run()});
  expect_refused(from_lora, "dora_from_lora", "model.use_dora=false");
}

TEST_F(FinetuneRun, LoraResumeReproducesTheRunExactly) {
  expect_resume_reproduces_the_run([&](const std::string& run, int64_t steps) { return lora_args(run, steps); },
                                   "lora");
  // Another rank is named as a setting, not met as an adapter tensor of the wrong shape.
  auto other_rank = lora_args("lora_resumed", 14);
  other_rank.insert(other_rank.end(), {"resume=latest", "model.lora_rank=8"});
  expect_refused(other_rank, "lora_other_rank", "(model.lora_rank 4 -> 8)");
}

// A token budget of samples of uneven lengths, in order (long ones first): a
// resume plans the steps the run it resumes planned (from the mean sample), not
// fewer because its first samples held more tokens than the mean.
TEST_F(FinetuneRun, AMaxTokensResumeReproducesTheRunExactly) {
  {
    std::ofstream out(root_ + "/uneven.jsonl");
    for (int i = 0; i < 48; ++i) {
      const std::string instruction =
          i < 16 ? "Repeat the last of these words: apple river stone cloud green piano tiger maple apple river stone "
                   "cloud green piano tiger maple apple river stone cloud green piano tiger maple"
                 : "Repeat maple.";
      out << "{\"instruction\": \"" << instruction << "\", \"output\": \"maple\"}\n";
    }
  }
  expect_resume_reproduces_the_run(
      [&](const std::string& run, int64_t) {
        std::vector<std::string> args = lora_args(run, 12);
        for (std::string& a : args) {
          if (a.starts_with("max_steps=")) a = "max_tokens=1300";
          if (a.starts_with("dataset.path=")) a = "dataset.path=" + root_ + "/uneven.jsonl";
        }
        args.push_back("dataset.shuffle=false");
        return args;
      },
      "lora_tokens");
}

// The pairs' order and the dropout masks continue where they were; full_dpo's
// reference is the starting model again.
TEST_F(FinetuneRun, DpoResumeReproducesTheRunExactly) {
  expect_resume_reproduces_the_run([&](const std::string& run, int64_t steps) { return dpo_args(run, steps); },
                                   "dpo");
  expect_resume_reproduces_the_run([&](const std::string& run, int64_t steps) { return full_dpo_args(run, steps); },
                                   "full_dpo");
}

TEST_F(FinetuneRun, LoraOnTwoRanksTrainsLikeOneProcessAccumulatingTheirBatches) {
  // Two ranks at ZeRO stage 2 with 2 samples each train like one process with two
  // micro-batches of 2 (the same sums, in the same order, up to rounding). In fp32
  // and without dropout: each rank draws its own masks. At stage 2 each unit's
  // adapter gradients go to their owners as backward releases the unit; at
  // stage 3 the frozen base and the adapters are both sharded and gathered.
  // Rows cut in multiples of 8: one process cuts each micro-batch to its own
  // longest sample, the ranks cut their global batch to its longest. AdamW
  // with eps 1 (lr 1), as at tensor parallelism below: rounding stays rounding.
  auto one = lora_args("lora_one", 6), two = lora_args("lora_two", 6);
  one.insert(one.end(), {"dtype=fp32", "model.lora_dropout=0", "batch_size=2", "gradient_accumulation_steps=2",
                         "checkpoint.format=hone", "dataset.pad_to_multiple_of=8", "optimizer.eps=1",
                         "optimizer.lr=1"});
  two.insert(two.end(), {"dtype=fp32", "model.lora_dropout=0", "batch_size=2", "distributed.zero=2",
                         "dataset.pad_to_multiple_of=8", "optimizer.eps=1", "optimizer.lr=1"});
  two = on_two_ranks(two);
  ASSERT_EQ(run_hone_to_log(one, root_ + "/lora_one.log"), 0) << read_file(root_ + "/lora_one.log");
  ASSERT_EQ(run_hone_to_log(two, root_ + "/lora_two.log"), 0) << read_file(root_ + "/lora_two.log");
  const auto a = losses("lora_one");
  expect_losses_of("lora_two", a, 6);
  std::replace(two.begin(), two.end(), std::string("distributed.zero=2"), std::string("distributed.zero=3"));
  std::replace(two.begin(), two.end(), "output_dir=" + root_ + "/lora_two", "output_dir=" + root_ + "/lora_zero3");
  ASSERT_EQ(run_hone_to_log(two, root_ + "/lora_zero3.log"), 0) << read_file(root_ + "/lora_zero3.log");
  expect_losses_of("lora_zero3", a, 6);
  // The checkpoint holds the adapters whole (gathered from both ranks), equal to
  // stage 2's up to rounding: the same two-rank sums, but the gradient norm adds
  // its squares in another order, and six AdamW steps carry that rounding on.
  // With AdamW's default eps a near-zero gradient's rounding could flip a whole
  // lr-sized update: 3e-5 seen with other random draws.
  const SafetensorsFile zero2(root_ + "/lora_two/step_0000006/adapter.safetensors");
  const SafetensorsFile zero3(root_ + "/lora_zero3/step_0000006/adapter.safetensors");
  ASSERT_EQ(zero3.names(), zero2.names());
  for (const std::string& name : zero2.names()) test::expect_close(zero3.load(name), zero2.load(name), 1e-5, name);
}

// DoRA data-parallel as LoRA above (its magnitudes' gradients reduced with the
// adapters'); ZeRO-3, which shards the rows DoRA takes norms of, is refused.
TEST_F(FinetuneRun, DoraOnTwoRanksTrainsLikeOneProcessAccumulatingTheirBatches) {
  auto one = lora_args("dora_one", 4), two = lora_args("dora_two", 4);
  for (auto* args : {&one, &two}) {
    args->insert(args->end(), {"dtype=fp32", "model.lora_dropout=0", "batch_size=2", "model.use_dora=true",
                               "dataset.pad_to_multiple_of=8"});
  }
  one.push_back("gradient_accumulation_steps=2");
  two.push_back("distributed.zero=2");
  two = on_two_ranks(two);
  ASSERT_EQ(run_hone_to_log(one, root_ + "/dora_one.log"), 0) << read_file(root_ + "/dora_one.log");
  ASSERT_EQ(run_hone_to_log(two, root_ + "/dora_two.log"), 0) << read_file(root_ + "/dora_two.log");
  expect_losses_of("dora_two", losses("dora_one"), 4);
  std::replace(two.begin(), two.end(), std::string("distributed.zero=2"), std::string("distributed.zero=3"));
  std::replace(two.begin(), two.end(), "output_dir=" + root_ + "/dora_two", "output_dir=" + root_ + "/dora_zero3");
  EXPECT_NE(run_hone_to_log(two, root_ + "/dora_zero3.log"), 0);
  EXPECT_NE(read_file(root_ + "/dora_zero3.log").find("not with tensor parallelism or ZeRO-3"), std::string::npos)
      << read_file(root_ + "/dora_zero3.log");
}

TEST_F(FinetuneRun, LoraAtTensorParallel2TrainsAndExportsLikeOneProcess) {
  // At tp 2 each rank holds half of every split adapter (B of q, k, v, gate, up;
  // A of output_proj, down_proj) and of the base weights; the single process and
  // the tp pair see the same batches. The checkpointed adapters, the PEFT
  // export and the merged Hugging Face export must equal the single process's
  // (which exports from memory; the tp run, whose weights are never whole on
  // one rank, from its final checkpoint, merging a tensor at a time). fp32 without dropout: the ranks compute
  // the split sums in another order. AdamW with eps 1 (lr 1): its update is
  // then nearly g itself, continuous in the gradient, so those rounding
  // differences stay of their own size (as for the data-parallel runs);
  // with a small eps a near-zero gradient's rounding flips the sign of a whole
  // lr-sized update, and six steps of that moved adapters by 1e-4 to 1e-3.
  // Rows cut in multiples of 8, which the tp pair must cut alike (sequence
  // parallelism splits their positions).
  const std::vector<std::string> common = {"dtype=fp32", "model.lora_dropout=0", "batch_size=2",
                                           "gradient_accumulation_steps=2", "export.dtype=fp32", "optimizer.eps=1",
                                           "optimizer.lr=1", "dataset.pad_to_multiple_of=8"};
  auto one = lora_args("lora_single", 6), tp = lora_args("lora_tp2", 6);
  one.insert(one.end(), common.begin(), common.end());
  one.insert(one.end(), {"export.hf=" + root_ + "/lora_single_hf", "export.peft=" + root_ + "/lora_single_peft"});
  tp.insert(tp.end(), common.begin(), common.end());
  tp.insert(tp.end(), {"distributed.tp=2", "export.hf=" + root_ + "/lora_tp2_hf",
                       "export.peft=" + root_ + "/lora_tp2_peft"});
  tp = on_two_ranks(tp);
  ASSERT_EQ(run_hone_to_log(one, root_ + "/lora_single.log"), 0) << read_file(root_ + "/lora_single.log");
  ASSERT_EQ(run_hone_to_log(tp, root_ + "/lora_tp2.log"), 0) << read_file(root_ + "/lora_tp2.log");
  const auto a = losses("lora_single");
  expect_losses_of("lora_tp2", a, 6);
  EXPECT_LT(a.at(6), a.at(1) - 0.5) << "the adapters should have learned: the comparisons below would prove less";
  for (const char* file :
       {"/step_0000006/adapter.safetensors", "_hf/model.safetensors", "_peft/adapter_model.safetensors"}) {
    const SafetensorsFile single(root_ + "/lora_single" + file), split(root_ + "/lora_tp2" + file);
    ASSERT_EQ(split.names(), single.names()) << file;
    for (const std::string& name : single.names()) {
      // Rounding carried over six steps: up to 1.2e-6 seen.
      test::expect_close(split.load(name), single.load(name), 3e-6, std::string(file) + " " + name);
    }
  }
}

TEST_F(FinetuneRun, PackedSamplesTrainInFewerSteps) {
  // 48 samples of about 40 tokens: packed, a row of 128 holds three.
  auto args = lora_args("packed", 6);
  args.push_back("dataset.packed=true");
  args.push_back("dataset.max_seq_len=128");
  args.push_back("epochs=1");
  args.erase(std::find(args.begin(), args.end(), "max_steps=6"));
  ASSERT_EQ(run_hone_to_log(args, root_ + "/packed.log"), 0) << read_file(root_ + "/packed.log");
  const std::string log = read_file(root_ + "/packed.log");
  // The run counts its rows (what batch_size and epochs count), and says what they hold.
  const size_t at = log.find(" packed rows per epoch");
  ASSERT_NE(at, std::string::npos) << log;
  const int64_t rows = std::stoll(log.substr(log.rfind(' ', at - 1) + 1, at));
  EXPECT_LT(rows, 46 / 2) << "46 training samples should pack at least two to a row:\n" << log;
  EXPECT_NE(log.find(fmt::format("; 46 samples packed into {} rows)", rows)), std::string::npos) << log;
}

// max_tokens counts the tokens the samples hold (Composer's), not rows of
// dataset.max_seq_len: the run takes the steps whose samples hold that many on
// average, and trains that many, give or take a step's.
TEST_F(FinetuneRun, ATokenBudgetCountsTheSamplesTokens) {
  auto args = lora_args("token_budget", 1);
  args.erase(std::find(args.begin(), args.end(), "max_steps=1"));
  args.push_back("max_tokens=1000");
  ASSERT_EQ(run_hone_to_log(args, root_ + "/token_budget.log"), 0) << read_file(root_ + "/token_budget.log");
  const std::string log = read_file(root_ + "/token_budget.log");
  const size_t at = log.find(" tokens each on average, ");
  ASSERT_NE(at, std::string::npos) << log;
  const double mean = std::stod(log.substr(log.rfind(' ', at - 1) + 1, at));
  EXPECT_LT(mean, 64.0) << log;  // below dataset.max_seq_len, which the budget counted before
  const size_t steps_at = log.find(" steps to run", at);
  ASSERT_NE(steps_at, std::string::npos) << log;
  const int64_t steps = std::stoll(log.substr(at + 25, steps_at - at - 25));
  EXPECT_NEAR(double(steps), 1000 / (4 * mean), 1.01) << log;  // the mean as logged, rounded
  const auto tokens = run_metric(root_ + "/token_budget", "time/token");
  ASSERT_EQ(int64_t(tokens.size()), steps);
  EXPECT_NEAR(tokens.rbegin()->second, 1000, 4 * 64);
  // Below one step's tokens, the note names the mean.
  args = lora_args("one_step_budget", 1);
  args.erase(std::find(args.begin(), args.end(), "max_steps=1"));
  args.push_back("max_tokens=10");
  ASSERT_EQ(run_hone_to_log(args, root_ + "/one_step_budget.log"), 0) << read_file(root_ + "/one_step_budget.log");
  const std::string one_step = read_file(root_ + "/one_step_budget.log");
  EXPECT_NE(one_step.find("note: max_tokens 10 is less than one step's "), std::string::npos) << one_step;
  EXPECT_NE(one_step.find(fmt::format(" tokens (global batch 4 x {:.1f} tokens a sample holds on average): the run "
                                      "takes one step",
                                      mean)),
            std::string::npos)
      << one_step;
}

TEST_F(FinetuneRun, ValidationPathValidatesOnRecordsOfItsOwn) {
  // Five records of the alpaca template in a file of their own, the fourth longer than dataset.max_seq_len.
  std::string long_output;
  for (int i = 0; i < 60; ++i) long_output += "amber ";
  std::ofstream(root_ + "/eval.jsonl") << "{\"instruction\": \"Repeat the word lemon.\", \"output\": \"lemon\"}\n"
                                       << "{\"instruction\": \"Repeat the word ocean.\", \"output\": \"ocean\"}\n"
                                       << "{\"instruction\": \"Repeat the word amber.\", \"output\": \"amber\"}\n"
                                       << "{\"instruction\": \"Repeat amber.\", \"output\": \"" << long_output << "\"}\n"
                                       << "{\"instruction\": \"Repeat the word maple.\", \"output\": \"maple\"}\n";
  auto args = lora_args("separate", 2);
  args.push_back("dataset.validation_path=" + root_ + "/eval.jsonl");
  ASSERT_EQ(run_hone_to_log(args, root_ + "/separate.log"), 0) << read_file(root_ + "/separate.log");
  const std::string log = read_file(root_ + "/separate.log");
  // All 48 records train (12 batches of 4); the 5 of eval.jsonl validate, the one cut said.
  EXPECT_NE(log.find("data: 48 samples per epoch (" + root_ + "/data.jsonl; validation: " + root_ +
                     "/eval.jsonl (5 samples)), "),
            std::string::npos)
      << log;
  EXPECT_NE(log.find(" tokens each on average, 2 steps to run"), std::string::npos) << log;
  // A fraction held out of dataset.path as well is refused, where it went unused.
  auto both = lora_args("both_validations", 2);
  both.insert(both.end(), {"dataset.validation_path=" + root_ + "/eval.jsonl", "dataset.validation_fraction=0.1"});
  expect_refused(both, "both_validations",
                 "hone: error: the command line: dataset.validation_fraction 0.1 would hold data out of dataset.path "
                 "for validation, where dataset.validation_path gives validation data of its own: give one of them");
  EXPECT_FALSE(fs::exists(root_ + "/both_validations"));
  // hone validate says so too; 0, or the default (which a run's saved config.yaml names), holds nothing out.
  both.front() = "validate";
  expect_refused(both, "both_validations_validated", "dataset.validation_fraction 0.1 would hold data out");
  for (const char* fraction : {"dataset.validation_fraction=0", "dataset.validation_fraction=0.05"}) {
    both.back() = fraction;
    EXPECT_EQ(run_hone_to_log(both, root_ + "/one_validation.log"), 0) << read_file(root_ + "/one_validation.log");
  }
  EXPECT_NE(log.find("validation data (dataset.validation_path): 1 sample cut to 64 tokens, 0 samples dropped"),
            std::string::npos)
      << log;
  // Each of them once, though batches of 4 do not divide 5: the loss hone run
  // eval gives the run's model on that file.
  std::smatch validation;
  ASSERT_TRUE(std::regex_search(log, validation,
                                std::regex(R"(step 2: validation loss ([0-9.]+) \(perplexity [0-9.]+\) over ([0-9]+) tokens)")))
      << log;
  const std::string out = root_ + "/separate_eval.out";
  ASSERT_EQ(run_hone_to_log({"run", "eval", "threads=1", "checkpoint.path=" + root_ + "/base",
                             "lora.adapter=" + root_ + "/separate", "tokenizer.path=" + tokenizer_,
                             "dataset.type=instruct", "dataset.path=" + root_ + "/eval.jsonl", "dataset.max_seq_len=64",
                             "batch_size=4", "max_batches=0"},
                            out),
            0)
      << read_file(out);
  const nlohmann::json evaluated = nlohmann::json::parse(read_file(out).substr(read_file(out).rfind("\n{") + 1));
  EXPECT_EQ(evaluated["tokens"], std::stoll(validation[2])) << evaluated.dump();
  EXPECT_NEAR(evaluated["loss"].get<double>(), std::stod(validation[1]), 1e-4) << evaluated.dump();
  // A validation file with nothing usable in it is refused before training.
  std::ofstream(root_ + "/empty.jsonl") << "\n";
  args = lora_args("no_validation", 2);
  args.push_back("dataset.validation_path=" + root_ + "/empty.jsonl");
  EXPECT_EQ(run_hone_to_log(args, root_ + "/no_validation.log"), 2);
  EXPECT_NE(read_file(root_ + "/no_validation.log").find("hone: error: " + root_ + "/empty.jsonl: no usable samples"),
            std::string::npos)
      << read_file(root_ + "/no_validation.log");
  EXPECT_FALSE(fs::exists(root_ + "/no_validation/metrics.jsonl"));
}

// LLM Foundry's pre-tokenized shards of the same records (the alpaca prompt's
// ids as input_ids, the output's as labels; raw int32 bytes, read as
// dataset.token_encoding_type says) train exactly as the records do.
TEST_F(FinetuneRun, PreTokenizedMdsTrainsLikeItsRecords) {
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(tokenizer_);
  std::vector<std::vector<std::string>> rows;
  std::ofstream aligned(root_ + "/aligned.jsonl");  // and as Hugging Face's input_ids and labels
  std::istringstream records(read_file(root_ + "/data.jsonl"));
  for (std::string line; std::getline(records, line);) {
    const auto record = nlohmann::json::parse(line);
    const std::string prompt =
        data::format_prompt({{"instruction", record["instruction"].get<std::string>()}}, data::InstructOptions{});
    std::vector<int32_t> prompt_ids = tokenizer->encode(prompt), output_ids = tokenizer->encode(record["output"].get<std::string>());
    rows.push_back({raw_bytes(prompt_ids), raw_bytes(output_ids)});
    output_ids.push_back(*tokenizer->eos_id());
    std::vector<int32_t> input_ids = prompt_ids, labels(prompt_ids.size(), -100);
    input_ids.insert(input_ids.end(), output_ids.begin(), output_ids.end());
    labels.insert(labels.end(), output_ids.begin(), output_ids.end());
    aligned << nlohmann::json{{"input_ids", input_ids}, {"labels", labels}}.dump() << "\n";
  }
  aligned.close();
  write_mds_fixture(root_ + "/pretokenized", {{"input_ids", "bytes"}, {"labels", "bytes"}}, rows);
  auto args = lora_args("from_records", 2);
  ASSERT_EQ(run_hone_to_log(args, root_ + "/from_records.log"), 0) << read_file(root_ + "/from_records.log");
  args = lora_args("from_tokens", 2);
  std::replace(args.begin(), args.end(), "dataset.path=" + root_ + "/data.jsonl",
               "dataset.path=" + root_ + "/pretokenized");
  args.push_back("dataset.token_encoding_type=int32");
  ASSERT_EQ(run_hone_to_log(args, root_ + "/from_tokens.log"), 0) << read_file(root_ + "/from_tokens.log");
  EXPECT_EQ(losses("from_tokens"), losses("from_records"));
  // Read as Foundry's default int64, sample 0's 35 prompt ids (140 bytes) are not whole ids.
  args = lora_args("wrong_type", 2);
  std::replace(args.begin(), args.end(), "dataset.path=" + root_ + "/data.jsonl",
               "dataset.path=" + root_ + "/pretokenized");
  expect_refused(args, "wrong_type",
                 "hone: error: " + root_ +
                     "/pretokenized/shard.00000.mds: sample 0, column 'input_ids': 140 bytes are not a whole number of "
                     "token ids (raw 'bytes' tokens read as int64: set dataset.token_encoding_type");

  // hone run eval takes the same dataset keys: the shards, Hugging Face-tokenized records, and the records under
  // other column names, lose the same.
  std::ofstream renamed(root_ + "/renamed.jsonl");
  std::istringstream again(read_file(root_ + "/data.jsonl"));
  for (std::string line; std::getline(again, line);) {
    const auto record = nlohmann::json::parse(line);
    renamed << nlohmann::json{{"task", record["instruction"]}, {"answer", record["output"]}}.dump() << "\n";
  }
  renamed.close();
  const std::vector<std::string> base = {"checkpoint.path=" + root_ + "/base", "tokenizer.path=" + tokenizer_};
  const auto eval_loss = [&](std::vector<std::string> data_args) {
    data_args.insert(data_args.end(), base.begin(), base.end());
    return instruct_eval_loss(data_args);
  };
  const double want = eval_loss({"dataset.path=" + root_ + "/data.jsonl"});
  EXPECT_EQ(eval_loss({"dataset.path=" + root_ + "/pretokenized", "dataset.token_encoding_type=int32"}), want);
  EXPECT_EQ(eval_loss({"dataset.path=" + root_ + "/aligned.jsonl"}), want);
  EXPECT_EQ(eval_loss({"dataset.path=" + root_ + "/renamed.jsonl", "dataset.column_map.instruction=task",
                       "dataset.column_map.output=answer"}),
            want);
}

TEST_F(FinetuneRun, FullFinetuneTrainsEveryWeight) {
  ASSERT_EQ(run_hone_to_log({"run", "full_finetune", "output_dir=" + root_ + "/full", "threads=1",
                             "checkpoint.path=" + root_ + "/base", "tokenizer.path=" + tokenizer_,
                             "dataset.path=" + root_ + "/data.jsonl", "dataset.max_seq_len=64", "batch_size=4",
                             "max_steps=20", "optimizer.lr=2e-3", "log_every_n_steps=1", "logging.tensorboard=false"},
                            root_ + "/full.log"),
            0)
      << read_file(root_ + "/full.log");
  const auto l = losses("full");
  EXPECT_LT(l.at(20), l.at(1) - 1.0);
  EXPECT_TRUE(fs::exists(root_ + "/full/step_0000020/model.safetensors"));
}

// A full fine-tune's checkpoint holds the whole model and its tokenizer: it
// resumes where the model it started from is gone (another run's step folders,
// rotated away), and keeps the record of it.
TEST_F(FinetuneRun, AFullFinetuneResumesWithoutItsBase) {
  fs::copy(root_ + "/base", root_ + "/rotating", fs::copy_options::recursive);
  const auto args = [&](int64_t steps) {
    return std::vector<std::string>{"run", "full_finetune", "output_dir=" + root_ + "/no_base", "threads=1",
                                    "checkpoint.path=" + root_ + "/rotating", "dataset.path=" + root_ + "/data.jsonl",
                                    "dataset.max_seq_len=64", "batch_size=4", "max_steps=" + std::to_string(steps),
                                    "resume=latest", "logging.tensorboard=false"};
  };
  const std::string log = root_ + "/no_base.log";
  ASSERT_EQ(run_hone_to_log(args(2), log), 0) << read_file(log);
  fs::remove_all(root_ + "/rotating/step_0000002");
  ASSERT_EQ(run_hone_to_log(args(4), log), 0) << read_file(log);
  const auto base_of = [&](const std::string& step) {
    return nlohmann::json::parse(read_file(root_ + "/no_base/" + step + "/trainer_state.json"))["base_model"];
  };
  EXPECT_EQ(base_of("step_0000004"), base_of("step_0000002"));
  EXPECT_EQ(read_file(root_ + "/no_base/step_0000004/vocab.json"), read_file(tokenizer_ + "/vocab.json"));
  // validate and plan size the run from its checkpoint too, the base gone altogether.
  fs::remove_all(root_ + "/rotating");
  std::vector<std::string> settings = args(6);
  settings.erase(settings.begin());
  settings.front() = "validate";
  settings.insert(settings.begin() + 1, "full_finetune");
  ASSERT_EQ(run_hone_to_log(settings, log), 0) << read_file(log);
  EXPECT_NE(read_file(log).find("(llama family) from " + root_ + "/no_base/step_0000004, 6.5M parameters"),
            std::string::npos)
      << read_file(log);
  settings.front() = "plan";
  settings.insert(settings.end(), {"--world-size", "2"});
  ASSERT_EQ(run_hone_to_log(settings, log), 0) << read_file(log);
}

// hone validate reads the tokenizer where it is here: a chat format whose
// tokens it lacks is refused before any run, as hone run refuses it.
TEST_F(FinetuneRun, ValidateChecksTheChatFormatAgainstTheTokenizer) {
  std::vector<std::string> args{"validate", "full_finetune", "output_dir=" + root_ + "/v",
                                "checkpoint.path=" + root_ + "/base", "dataset.path=" + root_ + "/data.jsonl",
                                "max_steps=1"};
  const std::string log = root_ + "/validate.log";
  ASSERT_EQ(run_hone_to_log(args, log), 0) << read_file(log);
  EXPECT_EQ(read_file(log).find("# data: "), std::string::npos) << read_file(log);  // the records are here
  // Records not on this machine yet: noted.
  std::vector<std::string> elsewhere = args;
  elsewhere.push_back("dataset.path=" + root_ + "/later/*.jsonl");
  ASSERT_EQ(run_hone_to_log(elsewhere, log), 0) << read_file(log);
  EXPECT_NE(read_file(log).find("# data: dataset.path " + root_ + "/later/*.jsonl does not exist here yet\n"),
            std::string::npos)
      << read_file(log);
  args.push_back("dataset.template=chat");
  EXPECT_EQ(run_hone_to_log(args, log), 2);
  EXPECT_NE(read_file(log).find("the llama3 chat format needs the special token <|eot_id|>, which this"),
            std::string::npos)
      << read_file(log);
}

// Unset, dataset.max_seq_len is 512 cut to the base model's 128; set beyond
// it, the run is refused.
TEST_F(FinetuneRun, SampleLengthDefaultsToWhatTheModelTakes) {
  std::vector<std::string> args{"run", "full_finetune", "output_dir=" + root_ + "/fits", "threads=1",
                                "checkpoint.path=" + root_ + "/base", "dataset.path=" + root_ + "/data.jsonl",
                                "batch_size=2", "max_steps=1", "logging.tensorboard=false"};
  ASSERT_EQ(run_hone_to_log(args, root_ + "/fits.log"), 0) << read_file(root_ + "/fits.log");
  EXPECT_NE(read_file(root_ + "/fits.log").find("batch: 2 x 128 tokens per micro-batch"), std::string::npos)
      << read_file(root_ + "/fits.log");
  args[2] = "output_dir=" + root_ + "/too_long";
  args.push_back("dataset.max_seq_len=200");
  EXPECT_EQ(run_hone_to_log(args, root_ + "/too_long.log"), 2);
  EXPECT_NE(read_file(root_ + "/too_long.log")
                .find("the command line: dataset.max_seq_len 200 exceeds the model's max_seq_len 128"),
            std::string::npos)
      << read_file(root_ + "/too_long.log");
}

TEST_F(FinetuneRun, FullFinetuneOnTwoRanksExportsTheWholeModel) {
  // At ZeRO-3 the ranks hold half of the weights each, at tp 2 half of every
  // projection; the final checkpoint and the Hugging Face export gather them whole.
  for (const auto& [name, layout] : {std::pair{"zero3", "distributed.zero=3"}, {"tp2", "distributed.tp=2"}}) {
    const std::string run = root_ + "/" + name;
    ASSERT_EQ(run_hone_to_log(on_two_ranks({"run", "full_finetune", "output_dir=" + run, "threads=1",
                                            "checkpoint.path=" + root_ + "/base", "tokenizer.path=" + tokenizer_,
                                            "dataset.path=" + root_ + "/data.jsonl", "dataset.max_seq_len=64",
                                            "batch_size=2", "max_steps=4", layout, "export.hf=" + run + "_hf",
                                            "export.dtype=fp32", "logging.tensorboard=false"}),
                              run + ".log"),
              0)
        << read_file(run + ".log");
    const SafetensorsFile saved(run + "/step_0000004/model.safetensors");
    const SafetensorsFile exported(run + "_hf/model.safetensors");
    EXPECT_EQ(exported.load("model.embed_tokens.weight").to_vector<float>(),
              saved.load("tok_embeddings.weight").to_vector<float>())
        << layout;
    EXPECT_EQ(exported.load("model.layers.1.mlp.down_proj.weight").to_vector<float>(),
              saved.load("layers.1.mlp.down.weight").to_vector<float>())
        << layout;
  }
}

// A LoRA run's checkpoint is a model: its base (the run's checkpoint.path) with
// its adapters merged, for hone convert and for any recipe's checkpoint.path.
TEST_F(FinetuneRun, ALoraRunIsItsBaseWithItsAdaptersMerged) {
  const std::string run = trained_lora_run();
  const std::string log = root_ + "/merged.log";
  ASSERT_EQ(run_hone_to_log({"convert", run, root_ + "/merged", "--to", "hf"}, log), 0) << read_file(log);
  EXPECT_NE(read_file(log).find("with the LoRA adapters of " + run + "/step_0000030 merged"), std::string::npos)
      << read_file(log);
  // The weights the run's own merged export (export.hf) wrote, and its tokenizer.
  const auto expect_weights_of = [&](const std::string& folder) {
    const SafetensorsFile got(folder + "/model.safetensors"), exported(root_ + "/hf/model.safetensors");
    ASSERT_EQ(got.names(), exported.names()) << folder;
    for (const std::string& name : got.names())
      EXPECT_EQ(got.load(name).to_vector<float>(), exported.load(name).to_vector<float>()) << folder << ": " << name;
  };
  expect_weights_of(root_ + "/merged");
  EXPECT_TRUE(fs::exists(root_ + "/merged/vocab.json"));
  // --adapter merges the run, or its PEFT export, into the model given.
  for (const std::string& adapter : {run, root_ + "/peft"}) {
    const std::string out = root_ + "/merged_" + fs::path(adapter).filename().string();
    ASSERT_EQ(run_hone_to_log({"convert", root_ + "/base", out, "--to", "hf", "--adapter", adapter}, log), 0)
        << read_file(log);
    expect_weights_of(out);
  }

  // As a recipe's model: what the base with lora.adapter gives.
  const auto eval_loss = [&](std::vector<std::string> model_args) {
    model_args.push_back("dataset.path=" + root_ + "/data.jsonl");
    return instruct_eval_loss(model_args);
  };
  EXPECT_EQ(eval_loss({"checkpoint.path=" + run}),
            eval_loss({"checkpoint.path=" + root_ + "/base", "lora.adapter=" + run, "tokenizer.path=" + tokenizer_}));
  // The run's checkpoint already holds its adapters merged: given them again
  // (as a folder of the run, or the run) they would count twice.
  const std::string twice_log = root_ + "/twice.log";
  const std::string already_merged = run + "/step_0000030: these LoRA adapters are already merged into ";
  ASSERT_EQ(run_hone_to_log({"convert", run, root_ + "/twice", "--to", "hf", "--adapter", run + "/step_0000030"},
                            twice_log),
            2);
  EXPECT_NE(read_file(twice_log).find(already_merged), std::string::npos) << read_file(twice_log);
  EXPECT_FALSE(fs::exists(root_ + "/twice"));
  ASSERT_EQ(run_hone_to_log({"run", "eval", "threads=1", "checkpoint.path=" + run + "/step_0000030",
                             "lora.adapter=" + run, "dataset.path=" + root_ + "/data.jsonl"},
                            twice_log),
            2);
  EXPECT_NE(read_file(twice_log).find(already_merged), std::string::npos) << read_file(twice_log);

  // A base that is not where the run found it is named (a run from before
  // checkpoints recorded their base: its checkpoint.path).
  const std::string moved = root_ + "/moved_lora";
  fs::copy(run + "/step_0000030", moved, fs::copy_options::recursive);
  auto state = nlohmann::json::parse(read_file(moved + "/trainer_state.json"));
  state["config"]["checkpoint"]["path"] = root_ + "/gone";
  state.erase("base_model");
  std::ofstream(moved + "/trainer_state.json") << state.dump();
  const std::string error_log = root_ + "/moved.log";
  EXPECT_EQ(run_hone_to_log({"convert", moved, root_ + "/never", "--to", "hf"}, error_log), 2);
  EXPECT_NE(read_file(error_log).find(moved + ": the checkpoint of a LoRA run, whose base model " + root_ +
                                      "/gone (where the run's checkpoint.path led) is not found from here"),
            std::string::npos)
      << read_file(error_log);
  EXPECT_FALSE(fs::exists(root_ + "/never"));
}

// A LoRA run given its base by a relative path finds it from another working
// directory too: its checkpoints record the folder as given and absolute.
TEST_F(FinetuneRun, ARelativeBaseIsFoundFromAnotherWorkingDirectory) {
  const fs::path before = fs::current_path();
  fs::current_path(root_);
  auto args = lora_args("relative_lora", 1);
  std::replace(args.begin(), args.end(), "checkpoint.path=" + root_ + "/base", std::string("checkpoint.path=base"));
  const int trained = run_hone_to_log(args, root_ + "/relative_lora.log");
  fs::create_directories(root_ + "/elsewhere");
  fs::current_path(root_ + "/elsewhere");
  const int converted =
      run_hone_to_log({"convert", root_ + "/relative_lora", root_ + "/relative_merged", "--to", "hone"},
                      root_ + "/relative_convert.log");
  fs::current_path(before);
  ASSERT_EQ(trained, 0) << read_file(root_ + "/relative_lora.log");
  const nlohmann::json base = nlohmann::json::parse(
      read_file(root_ + "/relative_lora/step_0000001/trainer_state.json"))["base_model"];
  EXPECT_EQ(base["folder"], "base/step_0000002");
  EXPECT_EQ(base["absolute_folder"], root_ + "/base/step_0000002");
  EXPECT_EQ(converted, 0) << read_file(root_ + "/relative_convert.log");
  EXPECT_NE(read_file(root_ + "/relative_convert.log").find(root_ + "/base/step_0000002"), std::string::npos)
      << read_file(root_ + "/relative_convert.log");
  // The adapters alone need no base: they go to PEFT with it gone.
  fs::rename(root_ + "/base", root_ + "/base_away");
  const int exported = run_hone_to_log({"convert", root_ + "/relative_lora", root_ + "/relative_peft", "--to", "peft"},
                                       root_ + "/relative_peft.log");
  fs::rename(root_ + "/base_away", root_ + "/base");
  EXPECT_EQ(exported, 0) << read_file(root_ + "/relative_peft.log");
  EXPECT_TRUE(fs::exists(root_ + "/relative_peft/adapter_model.safetensors"));
  EXPECT_NE(read_file(root_ + "/relative_peft.log").find("note: the base, base/step_0000002, is not found from here"),
            std::string::npos)
      << read_file(root_ + "/relative_peft.log");
}

// A LoRA run given a pretraining run's directory trains on its latest step
// then; its checkpoints record that step folder (and its weights' checksum),
// so a pretraining run that goes on later changes neither what the LoRA run is
// nor what its resume trains on, and adapters put on the later step say so.
TEST_F(FinetuneRun, AdaptersKeepTheBaseStepTheyWereTrainedOn) {
  const std::string growing = root_ + "/growing";
  fs::create_directories(growing);
  fs::copy(root_ + "/base/step_0000002", growing + "/step_0000002", fs::copy_options::recursive);
  const auto lora_on_growing = [&](int64_t steps) {
    auto args = lora_args("lora_on_growing", steps);
    std::replace(args.begin(), args.end(), "checkpoint.path=" + root_ + "/base", "checkpoint.path=" + growing);
    return args;
  };
  const std::string lora_log = root_ + "/lora_on_growing.log";
  ASSERT_EQ(run_hone_to_log(lora_on_growing(2), lora_log), 0) << read_file(lora_log);
  const std::string lora = root_ + "/lora_on_growing";
  const std::string trained_on = growing + "/step_0000002";
  EXPECT_NE(read_file(lora_log).find("from " + trained_on + ", "), std::string::npos) << read_file(lora_log);
  const auto recorded_base = [&](const std::string& step) {
    return nlohmann::json::parse(read_file(lora + "/" + step + "/trainer_state.json"))["base_model"];
  };
  EXPECT_EQ(recorded_base("step_0000002")["folder"], trained_on);
  EXPECT_EQ(recorded_base("step_0000002")["weights_xxh3"].get<std::string>().size(), 16u);

  // The pretraining run goes on: its latest is another model now.
  const std::string pretrain_log = root_ + "/growing_more.log";
  ASSERT_EQ(run_hone_to_log({"run", "pretrain", "output_dir=" + growing, "resume=latest", "threads=1",
                             "model.name=llama_tiny", "model.vocab_size=50257", "model.max_seq_len=128",
                             "dataset.seq_len=64", "max_steps=3", "logging.tensorboard=false",
                             "tokenizer.path=" + tokenizer_},
                            pretrain_log),
            0)
      << read_file(pretrain_log);
  ASSERT_EQ(read_file(growing + "/latest"), "step_0000003\n");

  // The LoRA run as a model is still its adapters on step 2 ...
  const std::string convert_log = root_ + "/growing_convert.log";
  ASSERT_EQ(run_hone_to_log({"convert", lora, root_ + "/growing_merged", "--to", "hone"}, convert_log), 0)
      << read_file(convert_log);
  EXPECT_NE(read_file(convert_log).find(trained_on), std::string::npos) << read_file(convert_log);
  ASSERT_EQ(run_hone_to_log({"convert", trained_on, root_ + "/growing_merged_by_hand", "--to", "hone", "--adapter",
                             lora},
                            convert_log),
            0)
      << read_file(convert_log);
  EXPECT_EQ(read_file(convert_log).find("note:"), std::string::npos) << read_file(convert_log);
  const SafetensorsFile merged(root_ + "/growing_merged/model.safetensors"),
      by_hand(root_ + "/growing_merged_by_hand/model.safetensors");
  for (const std::string& name : by_hand.names())
    EXPECT_EQ(merged.load(name).to_vector<float>(), by_hand.load(name).to_vector<float>()) << name;
  // ... put on the run directory (step 3 now) they say whose they are.
  const std::string generate_log = root_ + "/growing_generate.log";
  ASSERT_EQ(run_hone_to_log({"run", "generate", "threads=1", "checkpoint.path=" + growing, "lora.adapter=" + lora,
                             "tokenizer.path=" + tokenizer_, "prompt=hi", "max_new_tokens=2"},
                            generate_log),
            0)
      << read_file(generate_log);
  EXPECT_NE(read_file(generate_log).find("note: the adapters of " + lora + "/step_0000002 were trained on " +
                                         trained_on + " (weights xxh3 "),
            std::string::npos)
      << read_file(generate_log);
  EXPECT_NE(read_file(generate_log).find("and are put on " + growing + "/step_0000003 (weights xxh3 "),
            std::string::npos)
      << read_file(generate_log);

  // A resume trains on step 2 still, and says so.
  auto resumed = lora_on_growing(3);
  resumed.push_back("resume=latest");
  const std::string resumed_log = root_ + "/lora_on_growing_resumed.log";
  ASSERT_EQ(run_hone_to_log(resumed, resumed_log), 0) << read_file(resumed_log);
  EXPECT_NE(read_file(resumed_log).find("note: checkpoint.path " + growing + " is " + growing +
                                        "/step_0000003 (weights xxh3 "),
            std::string::npos)
      << read_file(resumed_log);
  EXPECT_NE(read_file(resumed_log).find("the run goes on from " + trained_on + ", which " + lora +
                                        "/step_0000002 was trained from (its adapters only mean something on it)"),
            std::string::npos)
      << read_file(resumed_log);
  EXPECT_EQ(recorded_base("step_0000003"), recorded_base("step_0000002"));

  // Where step 2 is gone, neither goes on silently on another model; a copy of
  // it elsewhere, given as checkpoint.path, is found by its checksum.
  fs::rename(trained_on, root_ + "/step_2_elsewhere");
  expect_refused({"convert", lora, root_ + "/growing_never", "--to", "hf"}, "growing_gone",
                 lora + "/step_0000003: the checkpoint of a LoRA run, whose base model " + trained_on +
                     " (where the run's checkpoint.path led) is not found from here");
  auto resumed_again = lora_on_growing(4);
  resumed_again.push_back("resume=latest");
  expect_refused(resumed_again, "growing_resume_gone",
                 "resume: " + lora + "/step_0000003 was trained from " + trained_on + " (weights xxh3 ");
  EXPECT_NE(read_file(root_ + "/growing_resume_gone.log")
                .find("which is not found here (its adapters only mean something on it), and checkpoint.path " +
                      growing + " is " + growing + "/step_0000003"),
            std::string::npos)
      << read_file(root_ + "/growing_resume_gone.log");
  std::replace(resumed_again.begin(), resumed_again.end(), "checkpoint.path=" + growing,
               "checkpoint.path=" + root_ + "/step_2_elsewhere");
  const std::string elsewhere_log = root_ + "/lora_on_growing_elsewhere.log";
  ASSERT_EQ(run_hone_to_log(resumed_again, elsewhere_log), 0) << read_file(elsewhere_log);
  EXPECT_EQ(recorded_base("step_0000004")["folder"], root_ + "/step_2_elsewhere");
  EXPECT_EQ(recorded_base("step_0000004")["weights_xxh3"], recorded_base("step_0000002")["weights_xxh3"]);

  // A step folder written again (a run resumed from an earlier step) holds another model.
  auto state = nlohmann::json::parse(read_file(lora + "/step_0000004/trainer_state.json"));
  state["base_model"]["weights_xxh3"] = "0123456789abcdef";
  std::ofstream(lora + "/step_0000004/trainer_state.json") << state.dump();
  expect_refused({"convert", lora + "/step_0000004", root_ + "/growing_never", "--to", "hf"}, "growing_changed",
                 "whose base model has changed since the run: it trained on " + root_ +
                     "/step_2_elsewhere (weights xxh3 0123456789abcdef), the folder holds " + root_ +
                     "/step_2_elsewhere (weights xxh3 ");
  EXPECT_FALSE(fs::exists(root_ + "/growing_never"));
}

TEST_F(FinetuneRun, GenerateAndEvalUseTheMergedAdapters) {
  const std::string run = trained_lora_run();
  auto eval = [&](const std::string& adapter, const std::string& batch_size = "batch_size=8",
                  const std::string& length = "dataset.seq_len=64") {
    std::vector<std::string> args = {"run", "eval", "threads=1", "checkpoint.path=" + root_ + "/base",
                                     "tokenizer.path=" + tokenizer_, "dataset.type=instruct",
                                     "dataset.path=" + root_ + "/data.jsonl", length, batch_size};
    if (!adapter.empty()) args.push_back("lora.adapter=" + adapter);
    const std::string out = root_ + "/eval.out";
    std::remove(out.c_str());  // the log is appended to
    Process p = start_hone(args, out);
    EXPECT_EQ(wait_for(p), 0) << read_file(out);
    const std::string text = read_file(out);
    return nlohmann::json::parse(text.substr(text.find('{'), text.find('}') - text.find('{') + 1));
  };
  const auto base = eval(""), tuned = eval(run);
  EXPECT_GT(tuned["tokens"].get<int64_t>(), 0);
  EXPECT_LT(tuned["loss"].get<double>(), base["loss"].get<double>() - 3.0);
  EXPECT_NEAR(tuned["perplexity"].get<double>(), std::exp(tuned["loss"].get<double>()), 1e-6);
  // The adapters exported in PEFT form read back as the same adapters.
  EXPECT_EQ(eval(root_ + "/peft")["loss"].get<double>(), tuned["loss"].get<double>());
  // Each of the 48 records counts once at any batch size (a last batch of 3 of 5, one batch of 48 of 100).
  EXPECT_EQ(tuned["samples"], 48);
  for (const char* batch_size : {"batch_size=5", "batch_size=100"}) {
    const auto other = eval(run, batch_size);
    EXPECT_EQ(other["tokens"], tuned["tokens"]) << batch_size;
    EXPECT_EQ(other["samples"], 48) << batch_size;
    EXPECT_NEAR(other["loss"].get<double>(), tuned["loss"].get<double>(), 1e-5) << batch_size;
  }
  EXPECT_EQ(eval(run, "max_batches=2")["samples"], 8);  // 2 batches of eval's default 4: max_batches' worth, said
  // Fine-tuning's dataset.max_seq_len is an instruct set's length here too.
  EXPECT_EQ(eval(run, "batch_size=8", "dataset.max_seq_len=64"), tuned);
  for (const auto& [extra, message] :
       {std::pair<std::string, std::string>{"dataset.seq_len=64", "give dataset.max_seq_len or dataset.seq_len, not both"},
        {"dataset.type=mock", "dataset.max_seq_len is instruct records' length; token data takes dataset.seq_len"}}) {
    const std::string out = root_ + "/length.out";
    std::remove(out.c_str());
    EXPECT_EQ(run_hone_to_log({"run", "eval", "checkpoint.path=" + root_ + "/base", "dataset.type=instruct",
                               "dataset.path=" + root_ + "/data.jsonl", "dataset.max_seq_len=64", extra},
                              out),
              2);
    EXPECT_NE(read_file(out).find(message), std::string::npos) << read_file(out);
  }

  std::ofstream(root_ + "/task.jsonl") << R"({"ctx": "Repeat the word apple.", "endings": [" apple", " river"], "label": 0})"
                                       << "\n";
  const std::string task_out = root_ + "/task.out";
  ASSERT_EQ(run_hone_to_log({"run", "eval", "threads=1", "checkpoint.path=" + root_ + "/base", "lora.adapter=" + run,
                             "tokenizer.path=" + tokenizer_, "task.path=" + root_ + "/task.jsonl"},
                            task_out),
            0)
      << read_file(task_out);
  EXPECT_NE(read_file(task_out).find("\"accuracy\":"), std::string::npos);
  EXPECT_NE(read_file(task_out).find("\"task_layout\":\"plain\""), std::string::npos) << read_file(task_out);
  // Off a terminal (a log file), progress lines: the last says every item is scored.
  EXPECT_NE(read_file(task_out).find("task (plain): 1/1 items, "), std::string::npos) << read_file(task_out);

  auto generate = [&](const std::string& out) {
    std::remove(out.c_str());
    EXPECT_EQ(run_hone_to_log({"run", "generate", "threads=1", "checkpoint.path=" + root_ + "/base",
                               "lora.adapter=" + run, "tokenizer.path=" + tokenizer_, "template=alpaca",
                               "prompt=Repeat the word tiger.", "temperature=0", "max_new_tokens=6"},
                              out),
              0);
    return read_file(out);
  };
  const std::string first = generate(root_ + "/gen1.out"), second = generate(root_ + "/gen2.out");
  EXPECT_NE(first.find("Repeat the word tiger."), std::string::npos) << first;
  EXPECT_NE(first.find("bandwidth achieved"), std::string::npos) << first;
  EXPECT_EQ(first.substr(0, first.find("prefill:")), second.substr(0, second.find("prefill:")));  // greedy: reproducible
  // Without a template, prompts are written as the run trained them (alpaca, its default): the same completion.
  const std::string as_trained = root_ + "/gen_as_trained.out";
  ASSERT_EQ(run_hone_to_log({"run", "generate", "threads=1", "checkpoint.path=" + root_ + "/base", "lora.adapter=" + run,
                             "tokenizer.path=" + tokenizer_, "prompt=Repeat the word tiger.", "temperature=0",
                             "max_new_tokens=6"},
                            as_trained),
            0);
  const std::string text = read_file(as_trained);
  EXPECT_NE(text.find("note: prompts are written as " + run + "/step_0000030 was fine-tuned: template alpaca "
                      "(template=plain writes them as given)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(first.substr(first.find("Repeat the word tiger."),
                                   first.find("prefill:") - first.find("Repeat the word tiger."))),
            std::string::npos)
      << text << "\n---\n" << first;
  // A key given here is not the run's: the note names what came from where.
  const std::string overridden = root_ + "/gen_overridden.out";
  ASSERT_EQ(run_hone_to_log({"run", "generate", "threads=1", "checkpoint.path=" + root_ + "/base", "lora.adapter=" + run,
                             "tokenizer.path=" + tokenizer_, "prompt=Repeat the word tiger.", "temperature=0",
                             "max_new_tokens=2", "system_prompt=''"},
                            overridden),
            0)
      << read_file(overridden);
  EXPECT_NE(read_file(overridden).find("was fine-tuned: template alpaca; system_prompt as given here (template=plain "
                                       "writes them as given)"),
            std::string::npos)
      << read_file(overridden);
}

// hone run eval on a GSM8K file: answers generated, scored, and each item's
// prompt, completion and scores in task.samples_path; the summary is their mean.
// A multiple-choice task writes each item's log-likelihoods and choice there.
TEST_F(FinetuneRun, EvalGeneratesGsm8kAnswersAndWritesEachItemsSample) {
  {
    std::ofstream task(root_ + "/gsm8k.jsonl");
    for (int i = 0; i < 3; ++i) {
      task << nlohmann::json{{"question", fmt::format("What is {} + {}?", i, i)},
                             {"answer", fmt::format("{0} + {0} = <<{0}+{0}={1}>>{1}\n#### {1}", i, 2 * i)}}
                  .dump()
           << "\n";
    }
  }
  const auto eval = [&](const std::string& task, const std::string& samples, const std::string& limit = "") {
    const std::string out = root_ + "/eval_task.out";
    std::remove(out.c_str());  // the log is appended to
    std::vector<std::string> args = {"run", "eval", "threads=1", "checkpoint.path=" + root_ + "/base",
                                     "tokenizer.path=" + tokenizer_, "task.path=" + root_ + "/" + task,
                                     "task.max_new_tokens=8", "batch_size=2", "task.samples_path=" + samples};
    if (!limit.empty()) args.push_back("task.limit=" + limit);
    EXPECT_EQ(run_hone_to_log(args, out), 0) << read_file(out);
    const std::string text = read_file(out);
    return nlohmann::json::parse(text.substr(text.rfind("\n{") + 1));
  };
  const std::string samples_path = root_ + "/gsm8k_samples.jsonl";
  const nlohmann::json result = eval("gsm8k.jsonl", samples_path);
  EXPECT_EQ(result["task_layout"], "gsm8k");
  EXPECT_EQ(result["task_items"], 3);
  std::istringstream lines(read_file(samples_path));
  double strict = 0, flexible = 0;
  int items = 0;
  for (std::string line; std::getline(lines, line); ++items) {
    const nlohmann::json sample = nlohmann::json::parse(line);
    EXPECT_EQ(sample["item"], items);
    EXPECT_EQ(sample["prompt"], fmt::format("Question: What is {0} + {0}?\nAnswer:", items));
    const AnswerScorer::Score score = AnswerScorer(answer_scoring(TaskLayout::gsm8k))
                                          .score(sample["completion"].get<std::string>(),
                                                 sample["references"].get<std::vector<std::string>>());
    EXPECT_EQ(sample["answer_strict"], score.answers[0]);
    EXPECT_EQ(sample["answer_flexible"], score.answers[1]);
    EXPECT_EQ(sample["exact_match_strict"], bool(score.matches[0]));
    EXPECT_EQ(sample["exact_match_flexible"], bool(score.matches[1]));
    strict += score.matches[0] / 3.0;
    flexible += score.matches[1] / 3.0;
  }
  EXPECT_EQ(items, 3);
  EXPECT_NEAR(result["exact_match_strict"].get<double>(), strict, 1e-12);
  EXPECT_NEAR(result["exact_match_flexible"].get<double>(), flexible, 1e-12);
  // task.limit: the first items, by count or by share (rounded up), each scored as before.
  for (const char* limit : {"2", "0.5"}) {
    const nlohmann::json limited = eval("gsm8k.jsonl", root_ + "/limited.jsonl", limit);
    EXPECT_EQ(limited["task_items"], 2) << limit;
    const std::string all = read_file(samples_path);
    EXPECT_EQ(read_file(root_ + "/limited.jsonl"), all.substr(0, all.find('\n', all.find('\n') + 1) + 1)) << limit;
  }

  std::ofstream(root_ + "/choices.jsonl") << R"({"ctx": "Repeat the word apple.", "endings": [" apple", " river"], "label": 1})"
                                          << "\n";
  const nlohmann::json choices = eval("choices.jsonl", root_ + "/choice_samples.jsonl");
  const nlohmann::json sample = nlohmann::json::parse(read_file(root_ + "/choice_samples.jsonl"));
  const std::vector<double> ll = sample["log_likelihoods"].get<std::vector<double>>();
  ASSERT_EQ(ll.size(), 2u);
  EXPECT_EQ(sample["chosen"], ll[1] > ll[0] ? 1 : 0);
  EXPECT_EQ(sample["correct"], ll[1] > ll[0]);
  EXPECT_EQ(choices["accuracy"].get<double>(), ll[1] > ll[0] ? 1.0 : 0.0);
  EXPECT_EQ(sample["context"], "Repeat the word apple.");
  // acc_norm's choice per item too, as the harness's --log_samples has it (" apple" and " river": one length).
  EXPECT_EQ(sample["correct_norm"], sample["correct"]);

  // LAMBADA: each item's log-likelihood and greediness; the perplexity from their mean.
  std::ofstream(root_ + "/lambada.jsonl") << R"({"text": "Repeat the word apple. apple"})" << "\n"
                                          << R"({"text": "Repeat the word river. stone"})" << "\n";
  const nlohmann::json lambada = eval("lambada.jsonl", root_ + "/lambada_samples.jsonl");
  EXPECT_EQ(lambada["task_layout"], "lambada");
  std::istringstream lambada_lines(read_file(root_ + "/lambada_samples.jsonl"));
  double log_likelihood_sum = 0, greedy = 0;
  std::vector<double> item_lls;
  for (std::string line; std::getline(lambada_lines, line);) {
    const nlohmann::json item = nlohmann::json::parse(line);
    log_likelihood_sum += item["log_likelihood"].get<double>();
    item_lls.push_back(item["log_likelihood"].get<double>());
    greedy += item["greedy"].get<bool>() ? 0.5 : 0.0;
  }
  const double perplexity = std::exp(-log_likelihood_sum / 2);
  EXPECT_NEAR(lambada["task_perplexity"].get<double>(), perplexity, 1e-9);
  EXPECT_EQ(lambada["accuracy"].get<double>(), greedy);
  // Its standard error by the delta method: perplexity · sd / √n (two items: sd = |a − b| / √2).
  EXPECT_NEAR(lambada["task_perplexity_stderr"].get<double>(),
              perplexity * std::abs(item_lls[0] - item_lls[1]) / std::sqrt(2.0) / std::sqrt(2.0), 1e-9 * perplexity);

  // wikitext (its document-level pages): word and byte perplexities over the pages' log-likelihoods.
  std::ofstream(root_ + "/wiki.jsonl") << R"({"page": " = Apple = \n Repeat the word apple . \n"})" << "\n"
                                       << R"({"page": " = River = \n Repeat the word river @-@ stone . \n"})" << "\n";
  const nlohmann::json wiki = eval("wiki.jsonl", root_ + "/wiki_samples.jsonl");
  EXPECT_EQ(wiki["task_layout"], "wikitext") << wiki.dump();
  std::istringstream wiki_lines(read_file(root_ + "/wiki_samples.jsonl"));
  double page_log_likelihood = 0, words = 0, bytes = 0;
  for (std::string line; std::getline(wiki_lines, line);) {
    const nlohmann::json page = nlohmann::json::parse(line);
    page_log_likelihood += page["log_likelihood"].get<double>();
    words += page["words"].get<double>();
    bytes += page["bytes"].get<double>();
  }
  EXPECT_EQ(words, 10 + 12);  // re.split(r"\s+") of each page, its leading and trailing space counting one each
  EXPECT_EQ(bytes, 38 + 48);
  EXPECT_NEAR(wiki["word_perplexity"].get<double>(), std::exp(-page_log_likelihood / words), 1e-9 * std::exp(-page_log_likelihood / words));
  EXPECT_NEAR(wiki["bits_per_byte"].get<double>(), -page_log_likelihood / bytes / std::log(2.0), 1e-12);
  // task.limit takes the first pages too (it scored them all).
  const nlohmann::json first_page = eval("wiki.jsonl", root_ + "/wiki_first.jsonl", "1");
  EXPECT_EQ(first_page["task_items"], 1) << first_page.dump();
  const std::string pages = read_file(root_ + "/wiki_samples.jsonl");
  EXPECT_EQ(read_file(root_ + "/wiki_first.jsonl"), pages.substr(0, pages.find('\n') + 1));

  // MMLU: each subject's and each category's accuracy, the standard errors
  // pooled as the harness's groups pool them (Σ (n_i − 1) s_i² / (N − k), over N).
  {
    std::ofstream mmlu(root_ + "/mmlu.jsonl");
    const char* subjects[] = {"abstract_algebra", "high_school_biology", "philosophy"};
    for (int i = 0; i < 9; ++i) {
      mmlu << nlohmann::json{{"question", fmt::format("Repeat the word {}.", i % 2 ? "apple" : "river")},
                             {"subject", subjects[i % 3]},
                             {"choices", {"apple", "river", "stone", "cloud"}},
                             {"answer", i % 4}}
                  .dump()
           << "\n";
    }
  }
  const nlohmann::json mmlu = eval("mmlu.jsonl", root_ + "/mmlu_samples.jsonl");
  std::istringstream mmlu_lines(read_file(root_ + "/mmlu_samples.jsonl"));
  std::map<int, std::vector<double>> by_subject;  // subject index -> 0/1 scores
  int index = 0;
  for (std::string line; std::getline(mmlu_lines, line); ++index)
    by_subject[index % 3].push_back(nlohmann::json::parse(line)["correct"].get<bool>());
  const auto sample_variance = [](const std::vector<double>& v) {
    const double mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
    double squares = 0;
    for (const double x : v) squares += (x - mean) * (x - mean);
    return squares / double(v.size() - 1);
  };
  const auto mean_of = [](const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()); };
  EXPECT_NEAR(mmlu["subjects"]["philosophy"]["accuracy"].get<double>(), mean_of(by_subject[2]), 1e-12) << mmlu.dump();
  EXPECT_NEAR(mmlu["subjects"]["philosophy"]["accuracy_stderr"].get<double>(),
              std::sqrt(sample_variance(by_subject[2]) / 3), 1e-12);
  // stem: abstract_algebra and high_school_biology (3 items each); humanities: philosophy.
  const double stem_variance = (2 * sample_variance(by_subject[0]) + 2 * sample_variance(by_subject[1])) / (6 - 2);
  EXPECT_NEAR(mmlu["categories"]["mmlu_stem"]["accuracy_stderr"].get<double>(), std::sqrt(stem_variance / 6), 1e-12);
  EXPECT_EQ(mmlu["categories"]["mmlu_stem"]["task_items"], 6);
  EXPECT_EQ(mmlu["categories"]["mmlu_humanities"]["task_items"], 3);
  EXPECT_GT(stem_variance, 0) << mmlu.dump();  // some spread, or the check above would hold for any pooling
  const double whole_variance = (5 * stem_variance + 2 * sample_variance(by_subject[2])) / (9 - 2);
  EXPECT_NEAR(mmlu["accuracy_stderr"].get<double>(), std::sqrt(whole_variance / 9), 1e-12) << mmlu.dump();

  // TruthfulQA's mc2: an item scores the true endings' share; the standard error is the shares' spread.
  std::ofstream(root_ + "/mc2.jsonl")
      << R"({"question": "Repeat the word apple.", "mc2_targets": {"choices": ["apple", "river", "stone"], "labels": [1, 0, 0]}})"
      << "\n"
      << R"({"question": "Repeat the word river.", "mc2_targets": {"choices": ["river", "stone"], "labels": [1, 0]}})"
      << "\n";
  const nlohmann::json mc2 = eval("mc2.jsonl", root_ + "/mc2_samples.jsonl");
  std::istringstream mc2_lines(read_file(root_ + "/mc2_samples.jsonl"));
  std::vector<double> shares;
  for (std::string line; std::getline(mc2_lines, line);) shares.push_back(nlohmann::json::parse(line)["score"]);
  ASSERT_EQ(shares.size(), 2u) << mc2.dump();
  EXPECT_NEAR(mc2["accuracy"].get<double>(), (shares[0] + shares[1]) / 2, 1e-12) << mc2.dump();
  EXPECT_NEAR(mc2["accuracy_stderr"].get<double>(), std::abs(shares[0] - shares[1]) / 2, 1e-12) << mc2.dump();

  // A samples file that cannot be written is an error before any item is scored.
  const std::string log = root_ + "/eval_bad_samples.log";
  EXPECT_EQ(run_hone_to_log({"run", "eval", "threads=1", "checkpoint.path=" + root_ + "/base",
                             "tokenizer.path=" + tokenizer_, "task.path=" + root_ + "/gsm8k.jsonl",
                             "task.samples_path=" + root_ + "/missing/samples.jsonl"},
                            log),
            2);
  EXPECT_NE(read_file(log).find(root_ + "/missing/samples.jsonl"), std::string::npos) << read_file(log);
  EXPECT_EQ(read_file(log).find("task (gsm8k)"), std::string::npos) << read_file(log);
  // Answers as long as the model's context leave no room for a question: the key named, before any scoring.
  EXPECT_EQ(run_hone_to_log({"run", "eval", "threads=1", "checkpoint.path=" + root_ + "/base",
                             "tokenizer.path=" + tokenizer_, "tasks.g.path=" + root_ + "/gsm8k.jsonl"},
                            log),
            2);
  EXPECT_NE(read_file(log).find("the command line: tasks.g.max_new_tokens 256 leaves no room for a prompt in the "
                                "model's max_seq_len 128: give a smaller one"),
            std::string::npos)
      << read_file(log);
  EXPECT_EQ(read_file(log).find("task (g)"), std::string::npos) << read_file(log);
}

// Ctrl-C during hone eval stops it before the next batch, 128 + the signal as a
// killed process's: no scores printed, and the samples file of the task not yet
// scored is not left half-made (was: a .tmp file).
TEST_F(FinetuneRun, EvalStopsOnSigintLeavingNoSamplesFile) {
  std::ofstream(root_ + "/stop_choices.jsonl")
      << R"({"ctx": "Repeat the word apple.", "endings": [" apple", " river"], "label": 0})" << "\n";
  const std::string folder = root_ + "/stopped_eval", log = root_ + "/stopped_eval.log";
  fs::create_directories(folder);
  const Process p = start_hone({"run", "eval", "threads=1", "checkpoint.path=" + root_ + "/base",
                                "tokenizer.path=" + tokenizer_, "dataset.type=mock",
                                "max_batches=0", "task.path=" + root_ + "/stop_choices.jsonl",
                                "task.samples_path=" + folder + "/samples.jsonl"},
                               log);
  ASSERT_TRUE(wait_for_log_line(log, "loss: ")) << read_file(log);  // a tenth of the batches scored
  ::kill(p.pid, SIGINT);
  EXPECT_EQ(wait_for(p), 128 + SIGINT) << read_file(log);
  EXPECT_NE(read_file(log).find("hone: eval stopped by signal 2; no scores printed"), std::string::npos)
      << read_file(log);
  EXPECT_TRUE(fs::is_empty(folder)) << read_file(log);
}

// `tasks` runs several tasks on one loaded model: each scores as it does alone,
// under its name, with its own settings (checked as task.*'s, under its name).
TEST_F(FinetuneRun, EvalRunsSeveralTasksEachAsItDoesAlone) {
  std::ofstream(root_ + "/several_choices.jsonl")
      << R"({"ctx": "Repeat the word apple.", "endings": [" apple", " river"], "label": 0})" << "\n"
      << R"({"ctx": "Repeat the word stone.", "endings": [" cloud", " stone"], "label": 1})" << "\n";
  std::ofstream(root_ + "/several_lambada.jsonl") << R"({"text": "Repeat the word apple. apple"})" << "\n";
  std::ofstream(root_ + "/several_gsm8k.jsonl")
      << nlohmann::json{{"question", "What is 1 + 1?"}, {"answer", "1 + 1 = 2\n#### 2"}}.dump() << "\n";
  const std::vector<std::string> model = {"run", "eval", "threads=1", "checkpoint.path=" + root_ + "/base",
                                          "tokenizer.path=" + tokenizer_, "batch_size=2"};
  const auto eval = [&](const std::vector<std::string>& extra, const std::string& name) {
    std::vector<std::string> args = model;
    args.insert(args.end(), extra.begin(), extra.end());
    const std::string out = root_ + "/" + name + ".out";
    std::remove(out.c_str());  // the log is appended to
    EXPECT_EQ(run_hone_to_log(args, out), 0) << read_file(out);
    const std::string text = read_file(out);
    return std::pair{nlohmann::json::parse(text.substr(text.rfind("\n{") + 1)), text};
  };
  const nlohmann::json choices = eval({"task.path=" + root_ + "/several_choices.jsonl"}, "alone_choices").first;
  const nlohmann::json lambada = eval({"task.path=" + root_ + "/several_lambada.jsonl"}, "alone_lambada").first;
  const nlohmann::json gsm8k =
      eval({"task.path=" + root_ + "/several_gsm8k.jsonl", "task.max_new_tokens=8"}, "alone_gsm8k").first;

  std::ofstream(root_ + "/several.yaml") << "tasks:\n"
                                         << "  choices: {path: " << root_ << "/several_choices.jsonl}\n"
                                         << "  lambada: {path: " << root_ << "/several_lambada.jsonl, samples_path: "
                                         << root_ << "/several_lambada_samples.jsonl}\n"
                                         << "  gsm8k: {path: " << root_ << "/several_gsm8k.jsonl, max_new_tokens: 8}\n";
  const auto [all, log] = eval({"--config", root_ + "/several.yaml"}, "several");
  ASSERT_TRUE(all.contains("tasks")) << all.dump();
  EXPECT_EQ(all["tasks"]["choices"], choices);
  EXPECT_EQ(all["tasks"]["lambada"], lambada);
  EXPECT_EQ(all["tasks"]["gsm8k"], gsm8k);
  EXPECT_EQ(all["tasks"].size(), 3u);
  EXPECT_TRUE(fs::exists(root_ + "/several_lambada_samples.jsonl"));
  EXPECT_NE(log.find("| choices | accuracy"), std::string::npos) << log;  // the table, by task and metric
  // Each mean of 0/1 scores has the harness's standard error beside it: sqrt(p (1 - p) / (n - 1)).
  const double p = choices["accuracy"], n = choices["task_items"];
  EXPECT_NEAR(choices["accuracy_stderr"].get<double>(), std::sqrt(p * (1 - p) / (n - 1)), 1e-12) << choices.dump();
  EXPECT_TRUE(gsm8k["exact_match_strict_stderr"].is_null()) << gsm8k.dump();  // one item: no spread to estimate
  // The same from the command line, a key at a time.
  const nlohmann::json overridden = eval({"tasks.choices.path=" + root_ + "/several_choices.jsonl"}, "several_cli").first;
  EXPECT_EQ(overridden["tasks"]["choices"], choices);

  // A task's settings are checked as task.*'s, under its name.
  expect_refused([&] {
    auto args = model;
    args.push_back("tasks.choices.pth=" + root_ + "/several_choices.jsonl");
    return args;
  }(), "several_typo", "tasks.choices.pth");
  expect_refused([&] {
    auto args = model;
    args.push_back("tasks.choices.num_fewshot=2");
    return args;
  }(), "several_no_path", "tasks.choices.path is missing");
  expect_refused([&] {
    auto args = model;
    args.insert(args.end(), {"task.path=" + root_ + "/several_choices.jsonl",
                             "tasks.choices.path=" + root_ + "/several_choices.jsonl"});
    return args;
  }(), "several_both", "give task.path (one task) or tasks (several), not both");
  // A samples file that is a task's input, or another task's samples: refused before anything is written.
  const std::string choices_file = root_ + "/several_choices.jsonl", before = read_file(choices_file);
  expect_refused([&] {
    auto args = model;
    args.insert(args.end(), {"task.path=" + choices_file, "task.samples_path=" + choices_file});
    return args;
  }(), "samples_over_input", "task.samples_path " + choices_file + " is also task.path: give each task's samples a file of their own");
  EXPECT_EQ(read_file(choices_file), before);
  expect_refused([&] {
    auto args = model;
    args.insert(args.end(), {"tasks.a.path=" + choices_file, "tasks.b.path=" + choices_file,
                             "tasks.a.samples_path=" + root_ + "/same.jsonl", "tasks.b.samples_path=" + root_ + "/same.jsonl"});
    return args;
  }(), "samples_twice", "tasks.b.samples_path " + root_ + "/same.jsonl is also tasks.a.samples_path");
  // Keys that would be ignored: a task's key beside tasks, a dataset without its type.
  expect_refused([&] {
    auto args = model;
    args.insert(args.end(), {"tasks.a.path=" + choices_file, "task.limit=1"});
    return args;
  }(), "task_key_beside_tasks", "task.limit is for task.path; with tasks, give it under tasks.NAME");
  expect_refused([&] {
    auto args = model;
    args.insert(args.end(), {"task.path=" + choices_file, "dataset.path=" + root_ + "/data.jsonl"});
    return args;
  }(), "dataset_without_type", "dataset.path needs dataset.type");
}

// Ctrl-C or SIGTERM ends generation after the batches decoded so far: they are
// printed and in samples_path (nothing left half-written); the status is 128 + signal.
TEST_F(FinetuneRun, GenerateStoppedByASignalKeepsTheFinishedBatches) {
  {
    std::ofstream many(root_ + "/many_prompts.txt");
    for (int i = 0; i < 5000; ++i) many << "Repeat the word apple " << i << ".\n";
  }
  const std::string samples = root_ + "/stopped.jsonl", log = root_ + "/stopped.out";
  const Process p = start_hone({"run", "generate", "threads=1", "checkpoint.path=" + root_ + "/base",
                                "prompts_file=" + root_ + "/many_prompts.txt", "batch_size=1", "max_new_tokens=32",
                                "temperature=0", "samples_path=" + samples},
                               log);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  const auto logged = [&] { return fs::exists(log) && read_file(log).find("[2] ") != std::string::npos; };
  while (!logged() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(::kill(p.pid, SIGINT), 0);
  EXPECT_EQ(wait_for(p), 128 + SIGINT);
  const std::string text = read_file(log);
  std::smatch stopped;
  ASSERT_TRUE(std::regex_search(text, stopped,
                                std::regex(R"(hone: generate stopped by signal 2 after ([0-9]+) of 5000 prompts )"
                                           R"(\(samples_path holds their completions\))")))
      << text;
  const int64_t completed = std::stoll(stopped[1]);
  EXPECT_GE(completed, 3);
  EXPECT_LT(completed, 5000);
  EXPECT_NE(text.find(fmt::format("[{}] Repeat the word apple {}.\n", completed - 1, completed - 1)), std::string::npos);
  EXPECT_EQ(text.find(fmt::format("[{}] ", completed)), std::string::npos) << "a batch cut short was printed";
  std::istringstream lines(read_file(samples));
  int64_t written = 0;
  for (std::string line; std::getline(lines, line); ++written) {
    EXPECT_EQ(nlohmann::json::parse(line)["prompt"], fmt::format("Repeat the word apple {}.", written));
  }
  EXPECT_EQ(written, completed);
  for (const auto& entry : fs::directory_iterator(root_)) {
    EXPECT_EQ(entry.path().filename().string().find("stopped.jsonl.tmp"), std::string::npos) << entry.path();
  }
}

TEST_F(FinetuneRun, GenerateFromTheMergedHfExportWithAPromptsFileSamplingAndStopTokens) {
  trained_lora_run();  // exports the merged model to hf/
  std::ofstream(root_ + "/prompts.txt") << "Repeat the word apple.\n\nRepeat the word river.\n";
  auto generate = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> args = {"run", "generate", "threads=1", "checkpoint.path=" + root_ + "/hf",
                                     "checkpoint.format=hf", "template=alpaca", "max_new_tokens=5"};
    args.insert(args.end(), extra.begin(), extra.end());
    const std::string out = root_ + "/" + name + ".out";
    std::remove(out.c_str());
    EXPECT_EQ(run_hone_to_log(args, out), 0) << read_file(out);
    // The completions: every line but the report on stderr (model, timings).
    std::istringstream lines(read_file(out));
    std::string completions;
    for (std::string line; std::getline(lines, line);) {
      bool report = false;
      for (const char* prefix : {"model: ", "prefill: ", "decode: ", "bandwidth achieved: "}) {
        if (line.rfind(prefix, 0) == 0) report = true;
      }
      if (!report) completions += line + "\n";
    }
    return completions;
  };
  // Greedy from the merged export equals greedy from the base with its adapters.
  const std::string merged = generate("merged", {"prompt=Repeat the word tiger.", "temperature=0"});
  const std::string adapted = generate("adapted", {"checkpoint.path=" + root_ + "/base", "checkpoint.format=hone",
                                                   "lora.adapter=" + trained_lora_run(), "tokenizer.path=" + tokenizer_,
                                                   "prompt=Repeat the word tiger.", "temperature=0"});
  EXPECT_EQ(merged, adapted);
  // Generation holds the weights once, in the compute dtype (a frozen model:
  // no fp32 master or gradients), beside a few activations and the KV cache.
  const std::string report = read_file(root_ + "/merged.out");
  std::smatch sizes;
  ASSERT_TRUE(std::regex_search(report, sizes,
                                std::regex(R"(\(([0-9.]+) (B|KiB|MiB) of weights read per step\); memory used: ([0-9.]+) )"
                                           R"((B|KiB|MiB))")))
      << report;
  const auto bytes = [](const std::string& number, const std::string& unit) {
    return std::stod(number) * (unit == "MiB" ? 1 << 20 : unit == "KiB" ? 1 << 10 : 1);
  };
  EXPECT_LT(bytes(sizes[3], sizes[4]), 1.5 * bytes(sizes[1], sizes[2])) << report;
  // A file of prompts (blank lines skipped) is one batch; seeded sampling repeats itself.
  const std::vector<std::string> sampled = {"prompts_file=" + root_ + "/prompts.txt", "temperature=0.9", "top_k=5",
                                            "top_p=0.9", "seed=7", "stop_tokens=[<|endoftext|>]"};
  const std::string first = generate("sampled1", sampled), second = generate("sampled2", sampled);
  EXPECT_NE(first.find("[0] Repeat the word apple.\n"), std::string::npos) << first;
  EXPECT_NE(first.find("[1] Repeat the word river.\n"), std::string::npos) << first;
  EXPECT_EQ(first.find("[2]"), std::string::npos) << first;
  EXPECT_EQ(first, second);
  EXPECT_NE(merged.find("Repeat the word tiger.\n"), std::string::npos) << merged;
  // Greedy completions do not depend on the batches they are decoded in, nor on a CRLF file's line ends.
  std::ofstream(root_ + "/prompts_crlf.txt") << "Repeat the word apple.\r\n\r\nRepeat the word river.\r\n";
  const std::string together = generate("together", {"prompts_file=" + root_ + "/prompts.txt", "temperature=0"});
  EXPECT_EQ(generate("one_by_one", {"prompts_file=" + root_ + "/prompts.txt", "temperature=0", "batch_size=1"}),
            together);
  EXPECT_EQ(generate("crlf", {"prompts_file=" + root_ + "/prompts_crlf.txt", "temperature=0"}), together);
  EXPECT_EQ(together.find('\r'), std::string::npos);
  // Nor on a UTF-8 byte-order mark; JSON Lines of records with a 'prompt' are the same prompts.
  std::ofstream(root_ + "/prompts_bom.txt") << "\xEF\xBB\xBFRepeat the word apple.\nRepeat the word river.\n";
  EXPECT_EQ(generate("bom", {"prompts_file=" + root_ + "/prompts_bom.txt", "temperature=0"}), together);
  std::ofstream(root_ + "/prompts.jsonl") << R"({"prompt": "Repeat the word apple."})" "\n\n"
                                          << R"({"prompt": "Repeat the word river.", "id": 2})" "\n";
  EXPECT_EQ(generate("jsonl", {"prompts_file=" + root_ + "/prompts.jsonl", "temperature=0"}), together);
  // A compressed file of prompts is read decompressed (was: its gzip bytes taken as a prompt).
  const std::string text = read_file(root_ + "/prompts.txt");
  gzFile gz = gzopen((root_ + "/prompts.txt.gz").c_str(), "wb");
  ASSERT_EQ(gzwrite(gz, text.data(), unsigned(text.size())), int(text.size()));
  ASSERT_EQ(gzclose(gz), Z_OK);
  EXPECT_EQ(generate("gzipped", {"prompts_file=" + root_ + "/prompts.txt.gz", "temperature=0"}), together);
  // A max_new_tokens beyond any length stops at max_seq_len.
  EXPECT_NE(generate("longest", {"prompt=x", "temperature=0", "max_new_tokens=9223372036854775807"}).find("x\n"),
            std::string::npos);
  // Refused: a chat format whose special tokens the tokenizer lacks, a stop token it does not have.
  EXPECT_EQ(run_hone_to_log({"run", "generate", "checkpoint.path=" + root_ + "/hf", "prompt=x", "template=chat",
                             "chat_format=chatml"},
                            root_ + "/chat.out"),
            2);
  EXPECT_NE(read_file(root_ + "/chat.out").find("needs the special token <|im_end|>"), std::string::npos)
      << read_file(root_ + "/chat.out");
  EXPECT_EQ(run_hone_to_log({"run", "generate", "checkpoint.path=" + root_ + "/hf", "prompt=x", "stop_tokens=[<|nope|>]"},
                            root_ + "/badstop.out"),
            2);
  EXPECT_NE(read_file(root_ + "/badstop.out").find("stop token '<|nope|>' is not a special token"), std::string::npos)
      << read_file(root_ + "/badstop.out");
  // The model's generation_config.json names more tokens to stop at, as
  // transformers reads it: with every id listed, a completion ends at once.
  fs::copy(root_ + "/base/step_0000002", root_ + "/base_eos", fs::copy_options::recursive);
  nlohmann::json all_ids = nlohmann::json::array();
  for (int64_t id = 0; id < 50257; ++id) all_ids.push_back(id);
  std::ofstream(root_ + "/base_eos/generation_config.json") << nlohmann::json{{"eos_token_id", all_ids}}.dump();
  const auto from_base = [&](const std::string& name, const std::string& folder) {
    return generate(name, {"checkpoint.path=" + root_ + folder, "checkpoint.format=hone", "template=plain",
                           "prompt=Repeat the word tiger.", "temperature=0"});
  };
  EXPECT_NE(from_base("base", "/base/step_0000002"), "Repeat the word tiger.\n\n\n");
  EXPECT_EQ(from_base("base_eos", "/base_eos"), "Repeat the word tiger.\n\n\n");
  // Its sampling settings are the defaults of those the config leaves unset (as
  // vLLM takes them; do_sample: false is greedy, as transformers reads it).
  fs::copy(root_ + "/base/step_0000002", root_ + "/base_greedy", fs::copy_options::recursive);
  std::ofstream(root_ + "/base_greedy/generation_config.json") << R"({"do_sample": false, "top_p": 0.9})";
  const auto completion_of = [&](const std::string& name, const std::string& folder, const std::string& extra) {
    const std::string out = root_ + "/" + name + ".out";
    std::remove(out.c_str());
    EXPECT_EQ(run_hone_to_log({"run", "generate", "threads=1", "checkpoint.path=" + root_ + folder,
                               "tokenizer.path=" + tokenizer_, "prompt=Repeat the word tiger.", "max_new_tokens=6",
                               extra},
                              out),
              0)
        << read_file(out);
    const std::string text = read_file(out);
    const size_t start = text.find("Repeat the word tiger.\n");
    return std::pair{text.substr(start, text.find("\n\n", start) - start), text};
  };
  const auto [by_file, log] = completion_of("greedy_by_file", "/base_greedy", "seed=7");
  EXPECT_NE(log.find("sampling: top_p 0.9, do_sample false (greedy) (the model's generation_config.json)"),
            std::string::npos)
      << log;
  EXPECT_EQ(by_file, completion_of("greedy_given", "/base/step_0000002", "temperature=0").first);
  // do_sample of another type than a boolean is not false: sampling as without it (was: an internal error).
  std::ofstream(root_ + "/base_greedy/generation_config.json") << R"({"do_sample": "no", "top_p": 0.9})";
  EXPECT_EQ(completion_of("do_sample_no", "/base_greedy", "seed=7").second.find("do_sample false"), std::string::npos);
  // A top_k that is no integer is named, not taken for the integer below it.
  std::ofstream(root_ + "/base_greedy/generation_config.json") << R"({"top_k": 1.5})";
  const std::string top_k_out = root_ + "/top_k.out";
  EXPECT_EQ(run_hone_to_log({"run", "generate", "checkpoint.path=" + root_ + "/base_greedy", "tokenizer.path=" + tokenizer_,
                             "prompt=Repeat the word tiger."},
                            top_k_out),
            2);
  EXPECT_NE(read_file(top_k_out).find("the model's generation_config.json: 'top_k' must be an integer, got 1.5"),
            std::string::npos)
      << read_file(top_k_out);
  // A prompts file without a prompt, adapters that are not there, a prompt too long: named.
  std::ofstream(root_ + "/blank_prompts.txt") << "\n  \n";
  std::ofstream long_prompts(root_ + "/long_prompts.txt");
  long_prompts << "Hello\n\n";
  for (int i = 0; i < 200; ++i) long_prompts << " apple";  // line 3: 200 tokens
  long_prompts << "\n";
  long_prompts.close();
  const std::pair<std::string, std::string> refused[] = {
      {"prompts_file=" + root_ + "/blank_prompts.txt", "prompts_file " + root_ + "/blank_prompts.txt: no prompts in it"},
      {"lora.adapter=" + root_ + "/no_adapters", root_ + "/no_adapters: not found (LoRA adapters: "},
      {"system_prompt=Be kind.", "system_prompt is a chat format's system message: the plain template writes plain "
                                 "text without one"},
      {"prompts_file=" + root_, "prompts_file " + root_ + ": is a folder, not a file of prompts"},
      {"prompts_file=" + root_ + "/no_prompt.jsonl", root_ + "/no_prompt.jsonl:1: no string 'prompt'"},
      {"samples_path=" + root_, root_ + ": is a folder; give the name of a file to write"}};
  std::ofstream(root_ + "/no_prompt.jsonl") << R"({"text": "Repeat the word apple."})" "\n";
  for (const auto& [arg, message] : refused) {
    const std::string prompt = arg.starts_with("prompts_file=") ? arg : "prompt=x";  // one or the other
    EXPECT_EQ(
        run_hone_to_log({"run", "generate", "checkpoint.path=" + root_ + "/hf", prompt, arg}, root_ + "/refused.out"),
        2);
    EXPECT_NE(read_file(root_ + "/refused.out").find(message), std::string::npos) << read_file(root_ + "/refused.out");
  }
  EXPECT_EQ(run_hone_to_log({"run", "generate", "checkpoint.path=" + root_ + "/hf", "max_new_tokens=8",
                             "prompts_file=" + root_ + "/long_prompts.txt"},
                            root_ + "/refused.out"),
            2);
  EXPECT_NE(read_file(root_ + "/refused.out").find(root_ + "/long_prompts.txt:3: the prompt (200 tokens: "),
            std::string::npos)
      << read_file(root_ + "/refused.out");
  EXPECT_NE(read_file(root_ + "/refused.out").find("is longer than the model's max_seq_len 128"), std::string::npos)
      << read_file(root_ + "/refused.out");
  // A prompt that leaves fewer positions than max_new_tokens: its completion
  // stops at max_seq_len (the last new token is never fed back: 128 new
  // tokens after a 1-token prompt fit), said once.
  const std::string samples = root_ + "/cut_short.jsonl";
  ASSERT_EQ(run_hone_to_log({"run", "generate", "checkpoint.path=" + root_ + "/hf", "prompt=x", "max_new_tokens=130",
                             "temperature=0", "samples_path=" + samples},
                            root_ + "/cut_short.out"),
            0)
      << read_file(root_ + "/cut_short.out");
  EXPECT_NE(read_file(root_ + "/cut_short.out")
                .find("note: max_new_tokens 130 does not fit the model's max_seq_len 128 after 1 prompt: its "
                      "completion stops there"),
            std::string::npos)
      << read_file(root_ + "/cut_short.out");
}

// A chat fine-tune's format travels as a chat template (data::chat_template):
// in the run's folder, every checkpoint (listed in its manifest), the export
// (chat_template.jinja and tokenizer_config.json) and a conversion of the run.
TEST_F(FinetuneRun, AChatFineTuneCarriesItsChatFormat) {
  std::ofstream chat(root_ + "/chat.jsonl");
  for (int i = 0; i < 8; ++i) {
    chat << R"({"messages": [{"role": "user", "content": "Repeat the word apple."}, )"
            R"({"role": "assistant", "content": "apple"}]})" "\n";
  }
  chat.close();
  auto args = lora_args("chat", 1);
  std::replace(args.begin(), args.end(), "dataset.path=" + root_ + "/data.jsonl", "dataset.path=" + root_ + "/chat.jsonl");
  args.insert(args.end(), {"dataset.template=chat", "dataset.chat_format=llama2", "dataset.system_prompt=Be brief.",
                           "export.hf=" + root_ + "/chat_hf"});
  ASSERT_EQ(run_hone_to_log(args, root_ + "/chat.log"), 0) << read_file(root_ + "/chat.log");
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(tokenizer_);
  const std::string jinja = *data::chat_template(
      *tokenizer, {.format = data::InstructTemplate::chat, .chat_format = data::ChatFormat::llama2,
                   .system_prompt = "Be brief."});
  EXPECT_EQ(read_file(root_ + "/chat/chat_template.jinja"), jinja);
  EXPECT_EQ(read_file(root_ + "/chat/step_0000001/chat_template.jinja"), jinja);
  EXPECT_NE(read_file(root_ + "/chat/step_0000001/manifest.json").find("chat_template.jinja"), std::string::npos);
  ASSERT_EQ(run_hone_to_log({"convert", root_ + "/chat", root_ + "/chat_converted", "--to", "hf"},
                            root_ + "/chat_convert.log"),
            0)
      << read_file(root_ + "/chat_convert.log");
  for (const char* exported : {"/chat_hf", "/chat_converted"}) {
    EXPECT_EQ(read_file(root_ + exported + "/chat_template.jinja"), jinja) << exported;
    const nlohmann::json config = nlohmann::json::parse(read_file(root_ + exported + "/tokenizer_config.json"));
    EXPECT_EQ(config["chat_template"], jinja) << exported;
    EXPECT_EQ(config["tokenizer_class"], "GPT2Tokenizer") << exported;
  }
}

TEST_F(FinetuneRun, CheckpointsCarryTheTokenizerToGenerateAndExports) {
  // The base was pretrained with tokenizer.path: its checkpoints hold the files, in the manifest.
  const std::string step = root_ + "/base/step_0000002";
  for (const char* file : {"vocab.json", "merges.txt"}) {
    EXPECT_TRUE(fs::exists(fs::path(step) / file)) << file;
    EXPECT_NE(read_file(step + "/manifest.json").find(file), std::string::npos) << file;
  }
  EXPECT_NO_THROW(verify_checkpoint(step));
  // So generation from the run needs no tokenizer.path, and an HF export has the tokenizer.
  EXPECT_EQ(run_hone_to_log({"run", "generate", "threads=1", "checkpoint.path=" + root_ + "/base", "prompt=Hello",
                             "max_new_tokens=2", "temperature=0"},
                            root_ + "/carry_generate.log"),
            0)
      << read_file(root_ + "/carry_generate.log");
  EXPECT_NE(read_file(root_ + "/carry_generate.log").find("Hello"), std::string::npos)
      << "the prompt and its completion: " << read_file(root_ + "/carry_generate.log");
  ASSERT_EQ(run_hone_to_log({"convert", root_ + "/base", root_ + "/base_hf", "--to", "hf"}, root_ + "/carry_convert.log"),
            0)
      << read_file(root_ + "/carry_convert.log");
  EXPECT_TRUE(fs::exists(root_ + "/base_hf/vocab.json"));
  EXPECT_TRUE(fs::exists(root_ + "/base_hf/merges.txt"));
  // A Llama with GPT-2's BPE files: tokenizer_config.json names the class
  // (transformers would look for a Llama tokenizer's files otherwise).
  const nlohmann::json tokenizer_config = nlohmann::json::parse(read_file(root_ + "/base_hf/tokenizer_config.json"));
  EXPECT_EQ(tokenizer_config["tokenizer_class"], "GPT2Tokenizer");
  EXPECT_EQ(tokenizer_config["model_max_length"], 128);
  // ...and hone reads the folder's tokenizer as before.
  EXPECT_EQ(run_hone_to_log({"run", "generate", "threads=1", "checkpoint.path=" + root_ + "/base_hf", "prompt=Hello",
                             "max_new_tokens=2", "temperature=0"},
                            root_ + "/carry_generate_hf.log"),
            0)
      << read_file(root_ + "/carry_generate_hf.log");
  // The prompt and its completion: stdout, printed before the report on stderr.
  const auto completion = [](const std::string& log) {
    const size_t start = log.find("Hello\n");
    return start == std::string::npos ? log : log.substr(start, log.find("model: ", start) - start);
  };
  EXPECT_EQ(completion(read_file(root_ + "/carry_generate_hf.log")),
            completion(read_file(root_ + "/carry_generate.log")));
  // A LoRA run started from it (no tokenizer.path: the base's latest checkpoint) carries it on.
  auto args = lora_args("carried", 1);
  args.erase(std::find(args.begin(), args.end(), "tokenizer.path=" + tokenizer_));
  ASSERT_EQ(run_hone_to_log(args, root_ + "/carried.log"), 0) << read_file(root_ + "/carried.log");
  EXPECT_TRUE(fs::exists(root_ + "/carried/step_0000001/vocab.json"));
  // A run pretrained without tokenizer.path carries none: generating from it says what to set.
  ASSERT_EQ(run_hone_to_log({"run", "pretrain", "output_dir=" + root_ + "/bare", "threads=1", "model.name=llama_tiny",
                             "model.max_seq_len=128", "dataset.seq_len=32", "max_steps=1", "logging.tensorboard=false"},
                            root_ + "/bare.log"),
            0)
      << read_file(root_ + "/bare.log");
  EXPECT_EQ(run_hone_to_log({"run", "generate", "checkpoint.path=" + root_ + "/bare", "prompt=x"},
                            root_ + "/bare_generate.log"),
            2);
  EXPECT_NE(read_file(root_ + "/bare_generate.log").find("set tokenizer.path: " + root_ + "/bare/step_0000001 holds no"),
            std::string::npos)
      << read_file(root_ + "/bare_generate.log");
  // Evaluating it on token data needs no tokenizer; sequences default to 256
  // tokens cut to its max_seq_len (50 batches of 4 x 128).
  ASSERT_EQ(run_hone_to_log({"run", "eval", "threads=1", "checkpoint.path=" + root_ + "/bare", "dataset.type=mock"},
                            root_ + "/bare_eval.log"),
            0)
      << read_file(root_ + "/bare_eval.log");
  EXPECT_NE(read_file(root_ + "/bare_eval.log").find("\"tokens\":25600,\"samples\":200,\"samples_in_data\":799}"),
            std::string::npos)
      << read_file(root_ + "/bare_eval.log");
  // Said on stderr, with a progress line at every tenth of the batches (a log file here).
  EXPECT_NE(read_file(root_ + "/bare_eval.log").find("note: max_batches 50 scores 200 of the data's 799 samples"),
            std::string::npos);
  EXPECT_NE(read_file(root_ + "/bare_eval.log").find("loss: 50/50 batches, "), std::string::npos);
  // max_batches=0: all of it (the last batch partial).
  ASSERT_EQ(run_hone_to_log({"run", "eval", "threads=1", "checkpoint.path=" + root_ + "/bare", "dataset.type=mock",
                             "max_batches=0", "dataset.mock.documents=20"},
                            root_ + "/bare_eval_all.log"),
            0)
      << read_file(root_ + "/bare_eval_all.log");
  const std::string all = read_file(root_ + "/bare_eval_all.log");
  const nlohmann::json scored = nlohmann::json::parse(all.substr(all.rfind('{')));
  EXPECT_EQ(scored["samples"], scored["samples_in_data"]) << all;
  EXPECT_EQ(all.find("note: max_batches"), std::string::npos) << all;
  // A tokenizer.path with no files to carry (a tiktoken rank file) is refused before training.
  const std::vector<std::string> pretrain = {"run", "pretrain", "model.name=llama_tiny", "model.vocab_size=50257",
                                             "dataset.seq_len=32", "max_steps=1", "threads=1"};
  const auto pretrain_with = [&](const std::string& run, const std::string& tokenizer) {
    std::vector<std::string> args = pretrain;
    args.push_back("output_dir=" + root_ + "/" + run);
    args.push_back("tokenizer.path=" + asset_path(tokenizer));
    return run_hone_to_log(args, root_ + "/" + run + ".log");
  };
  EXPECT_EQ(pretrain_with("no_files", "tokenizers/tiktoken/gpt2.json"), 2);
  EXPECT_NE(read_file(root_ + "/no_files.log").find("has no files a checkpoint can carry"), std::string::npos)
      << read_file(root_ + "/no_files.log");
  EXPECT_FALSE(fs::exists(root_ + "/no_files"));
  // OpenAI's GPT-2 files travel as Hugging Face's vocab.json and merges.txt (the same contents).
  ASSERT_EQ(pretrain_with("openai_files", "tokenizers/gpt2"), 0) << read_file(root_ + "/openai_files.log");
  const std::string carried = root_ + "/openai_files/step_0000001";
  EXPECT_EQ(read_file(carried + "/vocab.json"), read_file(asset_path("tokenizers/gpt2/encoder.json")));
  EXPECT_EQ(read_file(carried + "/merges.txt"), read_file(asset_path("tokenizers/gpt2/vocab.bpe")));
  ASSERT_EQ(run_hone_to_log({"convert", root_ + "/openai_files", root_ + "/openai_hf", "--to", "hf", "--tokenizer",
                             asset_path("tokenizers/gpt2")},
                            root_ + "/openai_hf.log"),
            0)
      << read_file(root_ + "/openai_hf.log");
  EXPECT_EQ(read_file(root_ + "/openai_hf/merges.txt"), read_file(asset_path("tokenizers/gpt2/vocab.bpe")));
  EXPECT_FALSE(fs::exists(root_ + "/openai_hf/encoder.json"));
}

// lora.adapter starts a LoRA run from adapters (a run's, or a PEFT folder)
// rather than new ones: at learning rate 0 the run's adapters are those it
// started from, whichever form they came in.
TEST_F(FinetuneRun, LoraStartsFromGivenAdapters) {
  const std::string run = trained_lora_run();
  const SafetensorsFile want(root_ + "/peft/adapter_model.safetensors");
  for (const std::string& adapter : {run, root_ + "/peft"}) {
    const std::string name = "start_" + fs::path(adapter).filename().string();
    auto args = lora_args(name, 1);
    args.push_back("optimizer.lr=0");
    args.push_back("lora.adapter=" + adapter);
    args.push_back("export.peft=" + root_ + "/" + name + "_peft");
    ASSERT_EQ(run_hone_to_log(args, root_ + "/" + name + ".log"), 0) << read_file(root_ + "/" + name + ".log");
    const SafetensorsFile got(root_ + "/" + name + "_peft/adapter_model.safetensors");
    ASSERT_EQ(got.names(), want.names()) << adapter;
    for (const std::string& tensor : want.names())
      EXPECT_EQ(got.load(tensor).to_vector<float>(), want.load(tensor).to_vector<float>()) << adapter << ": " << tensor;
    // It starts where the trained run ended, far below a new run's first loss.
    EXPECT_LT(losses(name).at(1), losses("lora").at(1) - 1.0) << adapter;
  }
  // Adapters of another LoRA shape: the error says what to set.
  auto args = lora_args("start_other_rank", 1);
  args.push_back("model.lora_rank=8");
  args.push_back("model.apply_lora_to_mlp=false");
  args.push_back("lora.adapter=" + root_ + "/peft");
  expect_refused(args, "start_other_rank",
                 "lora.adapter: the PEFT adapters of " + root_ +
                     "/peft are not of this run's LoRA shape; to start from them set model.lora_rank=4 "
                     "model.lora_alpha=16 model.apply_lora_to_mlp=true");
}

// Adapters go on a base of their shape, whatever its name.
TEST_F(FinetuneRun, AdaptersOfAnotherBaseModelAreRefused) {
  const std::string run = trained_lora_run();
  ASSERT_EQ(run_hone_to_log({"run", "pretrain", "output_dir=" + root_ + "/other", "threads=1", "model.name=llama_tiny",
                             "model.vocab_size=50257", "model.max_seq_len=128", "model.n_layers=3",
                             "dataset.seq_len=64", "max_steps=1", "logging.tensorboard=false"},
                            root_ + "/other.log"),
            0);
  const std::string out = root_ + "/other_gen.log";
  EXPECT_EQ(run_hone_to_log({"run", "generate", "checkpoint.path=" + root_ + "/other", "lora.adapter=" + run,
                             "tokenizer.path=" + tokenizer_, "prompt=hi"},
                            out),
            2);
  EXPECT_NE(read_file(out).find("adapters trained on another base model"), std::string::npos) << read_file(out);
  // The same shape under another name (an HF export of the base is named by its folder): taken, with a note.
  ASSERT_EQ(run_hone_to_log({"convert", root_ + "/base", root_ + "/base_as_hf", "--to", "hf"}, out), 0)
      << read_file(out);
  EXPECT_EQ(run_hone_to_log({"run", "generate", "checkpoint.path=" + root_ + "/base_as_hf", "lora.adapter=" + run,
                             "tokenizer.path=" + tokenizer_, "prompt=hi", "max_new_tokens=2"},
                            out),
            0)
      << read_file(out);
  EXPECT_NE(read_file(out).find("and are put on " + root_ + "/base_as_hf here"), std::string::npos) << read_file(out);
}

// DPO moves the adapters from the base (its reference) towards the chosen
// answers: the pairs' loss falls from log 2 and the chosen answers win.
TEST_F(FinetuneRun, DpoPrefersTheChosenAnswersAndExportsItsAdapters) {
  auto args = dpo_args("dpo", 20);
  args.push_back("export.peft=" + root_ + "/dpo_peft");
  ASSERT_EQ(run_hone_to_log(args, root_ + "/dpo.log"), 0) << read_file(root_ + "/dpo.log");
  const std::string log = read_file(root_ + "/dpo.log");
  EXPECT_NE(log.find("8 x 32 tokens per micro-batch, 1 micro-batch per step (4 preference pairs)"), std::string::npos)
      << log;
  EXPECT_NE(log.find("data: 46 pairs per epoch (" + root_ + "/pairs.jsonl (2 pairs held out))"), std::string::npos)
      << log;
  const auto l = losses("dpo");
  EXPECT_NEAR(l.at(1), std::log(2.0), 1e-6);  // B = 0: the model starts as its reference
  // Seen: 0.027, chosen rewards +1.97, margins 3.64, every pair won, in training and validation.
  EXPECT_LT(l.at(20), 0.2) << log;
  EXPECT_GE(run_metric(root_ + "/dpo", "rewards/accuracies").at(20), 0.75) << log;
  EXPECT_GT(run_metric(root_ + "/dpo", "rewards/chosen").at(20), 0.5) << log;
  EXPECT_GT(run_metric(root_ + "/dpo", "rewards/margins").at(20), 1.0) << log;
  EXPECT_GE(run_metric(root_ + "/dpo", "eval/rewards/accuracies").at(20), 0.75) << log;
  EXPECT_NE(log.find("step 20: validation DPO loss"), std::string::npos) << log;
  // The 2 held-out pairs each once (a batch holds 4: the rest is padding, not the pairs again).
  EXPECT_NE(log.find("% of 2 pairs (reward margin"), std::string::npos) << log;
  EXPECT_TRUE(fs::exists(root_ + "/dpo_peft/adapter_model.safetensors"));
}

// The other preference losses learn the same preferences: SimPO without a
// reference model (the per-token means of the answers), IPO's squared loss
// and RSO's hinge against the base.
TEST_F(FinetuneRun, SimpoIpoAndRsoPreferTheChosenAnswers) {
  for (const auto& [type, title, banner] :
       {std::tuple{"simpo", "SimPO", "SimPO: beta 2, gamma 0.5, label smoothing 0; no reference model"},
        std::tuple{"ipo", "IPO", "IPO: tau (beta) 0.1; the reference model is the base"},
        std::tuple{"rso", "RSO", "RSO (hinge loss): gamma (beta) 0.1; the reference model is the base"}}) {
    SCOPED_TRACE(type);
    const std::string run = std::string("pref_") + type;
    auto args = dpo_args(run, 20);
    args.push_back(std::string("loss.type=") + type);
    ASSERT_EQ(run_hone_to_log(args, root_ + "/" + run + ".log"), 0) << read_file(root_ + "/" + run + ".log");
    const std::string log = read_file(root_ + "/" + run + ".log");
    EXPECT_NE(log.find(banner), std::string::npos) << log;
    EXPECT_NE(log.find(fmt::format("step 20: validation {} loss", title)), std::string::npos) << log;
    const auto l = losses(run);
    EXPECT_LT(l.at(20), l.at(1)) << log;
    EXPECT_GE(run_metric(root_ + "/" + run, "rewards/accuracies").at(20), 0.75) << log;
    EXPECT_GE(run_metric(root_ + "/" + run, "eval/rewards/accuracies").at(20), 0.75) << log;
  }
}

// full_dpo trains every weight against a frozen copy of the starting model,
// which the memory estimate counts, and exports the model.
TEST_F(FinetuneRun, FullDpoPrefersTheChosenAnswersAndExportsTheModel) {
  auto args = full_dpo_args("full_dpo", 20);
  args.push_back("export.hf=" + root_ + "/full_dpo_hf");
  ASSERT_EQ(run_hone_to_log(args, root_ + "/full_dpo.log"), 0) << read_file(root_ + "/full_dpo.log");
  const std::string log = read_file(root_ + "/full_dpo.log");
  EXPECT_NE(log.find("DPO: beta 0.1, label smoothing 0; the reference model is a frozen copy of the model"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find(" + reference model "), std::string::npos) << log;
  const auto l = losses("full_dpo");
  EXPECT_NEAR(l.at(1), std::log(2.0), 1e-6);  // the model starts as its reference
  EXPECT_LT(l.at(20), 0.5) << log;  // seen: 0.42
  EXPECT_GE(run_metric(root_ + "/full_dpo", "rewards/accuracies").at(20), 0.75) << log;
  EXPECT_GE(run_metric(root_ + "/full_dpo", "eval/rewards/accuracies").at(20), 0.75) << log;
  EXPECT_TRUE(fs::exists(root_ + "/full_dpo/step_0000020/model.safetensors"));
  EXPECT_TRUE(fs::exists(root_ + "/full_dpo_hf/model.safetensors"));
  // SimPO needs no copy.
  auto simpo = full_dpo_args("full_simpo", 2);
  simpo.push_back("loss.type=simpo");
  ASSERT_EQ(run_hone_to_log(simpo, root_ + "/full_simpo.log"), 0) << read_file(root_ + "/full_simpo.log");
  EXPECT_EQ(read_file(root_ + "/full_simpo.log").find(" + reference model "), std::string::npos);
}

// A DPO run's checkpoints go on as DPO: resumed by another recipe (SFT on the
// same pairs' folder), the recipe change is named among those refused.
TEST_F(FinetuneRun, ADpoRunResumesOnlyAsDpo) {
  ASSERT_EQ(run_hone_to_log(dpo_args("dpo_then_sft", 1), root_ + "/dpo_then_sft.log"), 0)
      << read_file(root_ + "/dpo_then_sft.log");
  auto sft = dpo_args("dpo_then_sft", 2);
  sft[1] = "lora_finetune";
  sft.push_back("resume=latest");
  expect_refused(sft, "dpo_then_sft_resumed", "was trained with other settings (recipe \"lora_dpo\" -> \"lora_finetune\")");
  EXPECT_FALSE(fs::exists(root_ + "/dpo_then_sft/step_0000002"));
}

// Two ranks' pairs (each rank's pairs whole) train like one process
// accumulating them: the pairs' sums and the loss's scale are over all ranks.
TEST_F(FinetuneRun, DpoOnTwoRanksTrainsLikeOneProcessAccumulatingTheirBatches) {
  // ZeRO-3: the frozen base gathered for the reference's pass too.
  expect_two_ranks_like_one_accumulating([&](const std::string& run, int64_t steps) { return dpo_args(run, steps); },
                                         "dpo", {"model.lora_dropout=0"});
  const auto margins = run_metric(root_ + "/dpo_one", "rewards/margins");
  const auto two_margins = run_metric(root_ + "/dpo_two", "rewards/margins");
  for (const auto& [step, margin] : margins) EXPECT_NEAR(two_margins.at(step), margin, 1e-5) << step;
  // full_dpo: the trained model sharded, each rank's reference whole.
  expect_two_ranks_like_one_accumulating(
      [&](const std::string& run, int64_t steps) { return full_dpo_args(run, steps); }, "full_dpo", {});
}

TEST_F(FinetuneRun, DpoRefusesWhatItCannotTrain) {
  auto packed = dpo_args("dpo_packed", 2);
  packed.push_back("dataset.packed=true");
  expect_refused(packed, "dpo_packed", "DPO's pairs are not packed (dataset.packed)");
  auto tp = dpo_args("dpo_tp", 2);
  tp.push_back("distributed.tp=2");
  expect_refused(on_two_ranks(tp), "dpo_tp", "DPO with tensor parallelism is not supported");
  auto instruct = dpo_args("dpo_instruct", 2);
  std::replace(instruct.begin(), instruct.end(), "dataset.path=" + root_ + "/pairs.jsonl",
               "dataset.path=" + root_ + "/data.jsonl");
  expect_refused(instruct, "dpo_instruct", "data.jsonl:1: no 'chosen' column");
  auto adapter = dpo_args("dpo_adapter", 2);
  adapter.push_back("lora.adapter=" + root_ + "/peft");
  expect_refused(adapter, "dpo_adapter", "fine-tuned adapters go into the model first");
  // Keys the chosen loss would ignore.
  auto gamma = dpo_args("dpo_gamma", 2);
  gamma.push_back("loss.gamma=1");
  expect_refused(gamma, "dpo_gamma", "loss.gamma is for loss.type simpo; this run's loss.type is dpo");
  auto smoothing = dpo_args("ipo_smoothing", 2);
  smoothing.insert(smoothing.end(), {"loss.type=ipo", "loss.label_smoothing=0.1"});
  expect_refused(smoothing, "ipo_smoothing", "loss.label_smoothing is for loss.type dpo and simpo; this run's "
                 "loss.type is ipo");
  auto unknown = dpo_args("dpo_kto", 2);
  unknown.push_back("loss.type=kto");
  expect_refused(unknown, "dpo_kto", "loss.type");
}

TEST_F(FinetuneRun, BadSettingsAreOneLineErrors) {
  auto args = lora_args("bad", 2);
  args.push_back("model.lora_attn_modules=[q_proj, o_proj, w_proj]");
  EXPECT_EQ(run_hone_to_log(args, root_ + "/bad.log"), 2);
  EXPECT_NE(read_file(root_ + "/bad.log").find("'o_proj' is a Hugging Face module name"), std::string::npos)
      << read_file(root_ + "/bad.log");
  args.back() = "model.lora_attn_modules=[q_proj, w_proj]";
  EXPECT_EQ(run_hone_to_log(args, root_ + "/bad.log"), 2);
  EXPECT_NE(read_file(root_ + "/bad.log").find("unknown module 'w_proj'"), std::string::npos)
      << read_file(root_ + "/bad.log");
  EXPECT_EQ(run_hone_to_log({"run", "lora_finetune", "output_dir=" + root_ + "/bad2", "checkpoint.path=" + root_ + "/base",
                             "dataset.path=" + root_ + "/data.jsonl", "dataset.templat=alpaca"},
                            root_ + "/bad2.log"),
            2);
  EXPECT_NE(read_file(root_ + "/bad2.log").find("did you mean 'dataset.template'"), std::string::npos);
  // checkpoint.format names the format the model must have: a hone run is not a Hugging Face folder.
  auto wrong_format = lora_args("bad3", 2);
  wrong_format.push_back("checkpoint.format=hf");
  EXPECT_EQ(run_hone_to_log(wrong_format, root_ + "/bad3.log"), 2);
  EXPECT_NE(read_file(root_ + "/bad3.log").find("checkpoint.format is hf, but this is a hone model or checkpoint folder"),
            std::string::npos)
      << read_file(root_ + "/bad3.log");
  EXPECT_FALSE(fs::exists(root_ + "/bad3/latest"));
}

}  // namespace
}  // namespace hone::test
