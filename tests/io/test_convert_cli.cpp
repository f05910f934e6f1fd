// `hone convert` as a user runs it: exit status 0 and one summary line, or exit
// status 2 and one line `hone: error: ...` naming the file, nothing left behind.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "data/tokenizers/assets.hpp"
#include "hone/data/tokenizers/tokenizer.hpp"
#include "run_hone.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

namespace fs = std::filesystem;

class ConvertCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir() + "hone_convert_cli_" + std::to_string(::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  int convert(const std::vector<std::string>& args) {
    fs::remove(log_path());
    std::vector<std::string> all{"convert"};
    all.insert(all.end(), args.begin(), args.end());
    return run_hone_to_log(all, log_path());
  }
  std::string log_path() const { return dir_ + "/log.txt"; }
  std::string log() const { return read_file(log_path()); }
  std::string fixture(const std::string& name) const { return source_path("tests/reference/hf/" + name); }
  // A one-step run of a tiny Llama with this vocabulary and tokenizer, in dir_/run.
  int pretrain_run(int64_t vocab_size, const std::string& tokenizer) {
    return run_hone_to_log({"run", "pretrain", "output_dir=" + dir_ + "/run", "threads=1", "model.name=llama_tiny",
                            "model.vocab_size=" + std::to_string(vocab_size), "dataset.seq_len=16", "max_steps=1",
                            "logging.tensorboard=false", "tokenizer.path=" + tokenizer},
                           log_path());
  }

  std::string dir_;
};

TEST_F(ConvertCli, ConvertsEveryFormatBothWays) {
  EXPECT_EQ(convert({fixture("llama31_sharded"), dir_ + "/llama_hone", "--to", "hone"}), 0) << log();
  EXPECT_NE(log().find("-> " + dir_ + "/llama_hone (hone folder, fp32 weights)"), std::string::npos) << log();
  EXPECT_EQ(convert({dir_ + "/llama_hone", dir_ + "/llama_hf", "--to", "hf", "--dtype", "bf16", "--shard-size",
                     "20KB"}),
            0)
      << log();
  EXPECT_TRUE(fs::exists(dir_ + "/llama_hf/model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(dir_ + "/llama_hf/tokenizer.json"));
  EXPECT_EQ(convert({fixture("gpt2"), dir_ + "/gpt2_hf", "--to", "hf"}), 0) << log();
  // Without a tokenizer or generation_config.json, the source's config.json names the ids.
  for (const char* file : {"config.json", "generation_config.json"}) {
    const auto written = nlohmann::json::parse(read_file(dir_ + "/gpt2_hf/" + file));
    EXPECT_EQ(written["bos_token_id"], 47) << file;
    EXPECT_EQ(written["eos_token_id"], 47) << file;
  }
  EXPECT_EQ(convert({fixture("mistral_f16"), dir_ + "/mistral", "--to", "hf"}), 0) << log();
  EXPECT_NE(log().find("note: sliding_window 16"), std::string::npos) << log();
  EXPECT_EQ(convert({fixture("llmc_gpt2_bf16.bin"), dir_ + "/gpt2", "--to", "hf", "--tokenizer",
                     fixture("llama31_sharded")}),
            0)
      << log();
  EXPECT_TRUE(fs::exists(dir_ + "/gpt2/tokenizer_config.json"));
  EXPECT_EQ(convert({fixture("llama2c_legacy.bin"), dir_ + "/stories", "--to", "hone"}), 0) << log();
  EXPECT_NE(log().find("llama2.c file"), std::string::npos) << log();
}

// config.json and generation_config.json name the special ids of the tokenizer
// that goes along (transformers would otherwise take LlamaConfig's BOS 1 and EOS 2);
// a tokenizer with more tokens than the model is refused.
TEST_F(ConvertCli, TheExportNamesTheTokenizersSpecialIds) {
  const std::string gpt2 = asset_path("tokenizers/gpt2-hf");
  // A run of a tiny Llama with GPT-2's vocabulary keeps GPT-2's tokenizer files.
  ASSERT_EQ(pretrain_run(50257, gpt2), 0) << log();
  EXPECT_EQ(convert({dir_ + "/run", dir_ + "/hf", "--to", "hf"}), 0) << log();
  for (const char* file : {"config.json", "generation_config.json"}) {
    const auto written = nlohmann::json::parse(read_file(dir_ + "/hf/" + file));
    EXPECT_EQ(written["bos_token_id"], 50256) << file;  // <|endoftext|>
    EXPECT_EQ(written["eos_token_id"], 50256) << file;
  }
  // Llama 3's tokenizer instead: its own ids, and more tokens than the model has.
  EXPECT_EQ(convert({dir_ + "/run", dir_ + "/llama3", "--to", "hf", "--tokenizer", asset_path("tokenizers/llama3")}),
            2);
  EXPECT_NE(log().find("/llama3: the tokenizer has 128256 tokens, more than the model's vocabulary of 50257"),
            std::string::npos)
      << log();
  EXPECT_FALSE(fs::exists(dir_ + "/llama3"));
}

// Llama 3's tiktoken tokenizer.model goes into original/, as in Meta's Hugging
// Face repos: at the top, transformers and llama.cpp's converter would read it
// as SentencePiece's. Alone, it also becomes a tokenizer.json.
TEST_F(ConvertCli, TiktokensTokenizerModelGoesIntoOriginal) {
  const std::string llama3 = asset_path("tokenizers/llama3");
  ASSERT_EQ(pretrain_run(128256, llama3), 0) << log();
  EXPECT_EQ(convert({dir_ + "/run", dir_ + "/hf", "--to", "hf"}), 0) << log();
  EXPECT_TRUE(fs::exists(dir_ + "/hf/tokenizer.json"));
  EXPECT_TRUE(fs::exists(dir_ + "/hf/original/tokenizer.model"));
  EXPECT_FALSE(fs::exists(dir_ + "/hf/tokenizer.model"));
  // Meta's tokenizer alone (what a Meta folder holds).
  fs::create_directories(dir_ + "/tiktoken_only");
  fs::copy_file(llama3 + "/tokenizer.model", dir_ + "/tiktoken_only/tokenizer.model");
  EXPECT_EQ(convert({dir_ + "/run", dir_ + "/hf_tiktoken", "--to", "hf", "--tokenizer", dir_ + "/tiktoken_only"}), 0)
      << log();
  EXPECT_FALSE(fs::exists(dir_ + "/hf_tiktoken/tokenizer.model"));
  // transformers and vLLM read a tokenizer.json: one is made from the rank file
  // (tiktoken_as_hf_tokenizer), with a tokenizer_config.json naming BOS and EOS.
  EXPECT_TRUE(fs::exists(dir_ + "/hf_tiktoken/tokenizer.json"));
  const nlohmann::json config = nlohmann::json::parse(read_file(dir_ + "/hf_tiktoken/tokenizer_config.json"));
  EXPECT_EQ(config["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ(config["bos_token"], "<|begin_of_text|>");
  EXPECT_EQ(config["model_max_length"], 256);  // llama_tiny's max_seq_len
  const std::string text = "Hello world <|eot_id|>";
  EXPECT_EQ(load_tokenizer(dir_ + "/hf_tiktoken/tokenizer.json")->encode(text, SpecialTokens::recognize),
            load_tokenizer(llama3)->encode(text, SpecialTokens::recognize));
  EXPECT_EQ(load_tokenizer(dir_ + "/hf_tiktoken")->encode("Hello world"), load_tokenizer(llama3)->encode("Hello world"));
  const auto added_token = [](const std::string& folder, int id) {
    const nlohmann::json tokenizer = nlohmann::json::parse(read_file(folder + "/tokenizer.json"));
    for (const auto& token : tokenizer["added_tokens"]) {
      if (token["id"] == id) return token["content"].get<std::string>();
    }
    return std::string("(none)");
  };
  EXPECT_EQ(added_token(dir_ + "/hf_tiktoken", 128008), "<|reserved_special_token_4|>");  // llama_tiny: Llama 3's names
  // A Llama 3.1 or 3.2 model (its RoPE scaling tells) names three reserved
  // tokens as transformers' converter does for those releases.
  ASSERT_EQ(run_hone_to_log({"run", "pretrain", "output_dir=" + dir_ + "/run31", "threads=1", "model.name=llama_tiny",
                             "model.vocab_size=128256", "model.rope_scaling.factor=8",
                             "model.rope_scaling.low_freq_factor=1", "model.rope_scaling.high_freq_factor=4",
                             "model.rope_scaling.original_max_position=64", "dataset.seq_len=16", "max_steps=1",
                             "logging.tensorboard=false"},
                            log_path()),
            0)
      << log();
  EXPECT_EQ(convert({dir_ + "/run31", dir_ + "/meta32_hf", "--to", "hf", "--tokenizer", dir_ + "/tiktoken_only"}), 0)
      << log();
  for (const auto& [id, name] : std::vector<std::pair<int, std::string>>{{128004, "<|finetune_right_pad_id|>"},
                                                                          {128005, "<|reserved_special_token_2|>"},
                                                                          {128008, "<|eom_id|>"},
                                                                          {128010, "<|python_tag|>"},
                                                                          {128011, "<|reserved_special_token_3|>"},
                                                                          {128255, "<|reserved_special_token_247|>"}}) {
    EXPECT_EQ(added_token(dir_ + "/meta32_hf", id), name) << id;
  }
}

// A chat fine-tune ends its answers with the chat format's end of turn: its
// conversion lists it among the EOS ids, as the run's export.hf does, so that
// transformers and vLLM stop there. A model without a tokenizer names no ids: a note says so.
TEST_F(ConvertCli, AChatFineTunesEndOfTurnIsAnEosIdAndNoTokenizerIsNoted) {
  ASSERT_EQ(pretrain_run(128256, asset_path("tokenizers/llama3")), 0) << log();
  {
    std::ofstream chat(dir_ + "/chat.jsonl");
    for (int i = 0; i < 4; ++i) {
      chat << R"({"messages": [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "hi"}]})"
           << "\n";
    }
  }
  ASSERT_EQ(run_hone_to_log({"run", "lora_finetune", "checkpoint.path=" + dir_ + "/run", "output_dir=" + dir_ + "/lora",
                             "dataset.path=" + dir_ + "/chat.jsonl", "dataset.template=chat", "max_steps=1",
                             "threads=1", "dataset.validation_fraction=0", "logging.tensorboard=false"},
                            log_path()),
            0)
      << log();
  EXPECT_EQ(convert({dir_ + "/lora", dir_ + "/lora_hf", "--to", "hf"}), 0) << log();
  const auto eos_ids = [&](const std::string& folder) {
    return nlohmann::json::parse(read_file(folder + "/generation_config.json"))["eos_token_id"];
  };
  EXPECT_EQ(eos_ids(dir_ + "/lora_hf"), nlohmann::json::array({128001, 128009}));  // <|end_of_text|>, <|eot_id|>
  EXPECT_EQ(convert({dir_ + "/run", dir_ + "/base_hf", "--to", "hf"}), 0) << log();
  EXPECT_EQ(eos_ids(dir_ + "/base_hf"), 128001);

  ASSERT_EQ(run_hone_to_log({"run", "pretrain", "output_dir=" + dir_ + "/bare", "threads=1", "model.name=llama_tiny",
                             "dataset.seq_len=16", "max_steps=1", "logging.tensorboard=false"},
                            log_path()),
            0)
      << log();
  EXPECT_EQ(convert({dir_ + "/bare", dir_ + "/bare_hf", "--to", "hf"}), 0) << log();
  EXPECT_NE(log().find("note: config.json and generation_config.json name no BOS or EOS id: the source has no "
                       "tokenizer hone reads (give --tokenizer DIR), and transformers takes its config class's "
                       "defaults instead (LlamaConfig's BOS 1, EOS 2)"),
            std::string::npos)
      << log();
  // Each family's class has its own defaults.
  ASSERT_EQ(run_hone_to_log({"run", "pretrain", "output_dir=" + dir_ + "/bare_gpt2", "threads=1",
                             "model.name=gpt2_tiny", "dataset.seq_len=16", "max_steps=1", "logging.tensorboard=false"},
                            log_path()),
            0)
      << log();
  EXPECT_EQ(convert({dir_ + "/bare_gpt2", dir_ + "/bare_gpt2_hf", "--to", "hf"}), 0) << log();
  EXPECT_NE(log().find("defaults instead (GPT2Config's BOS and EOS 50256)"), std::string::npos) << log();
  EXPECT_EQ(log().find("vLLM's GPT-2 ties"), std::string::npos) << log();
  // An untied GPT-2 is one transformers reads and vLLM does not.
  ASSERT_EQ(run_hone_to_log({"run", "pretrain", "output_dir=" + dir_ + "/untied_gpt2", "threads=1",
                             "model.name=gpt2_tiny", "model.tie_embeddings=false", "dataset.seq_len=16", "max_steps=1",
                             "logging.tensorboard=false"},
                            log_path()),
            0)
      << log();
  EXPECT_EQ(convert({dir_ + "/untied_gpt2", dir_ + "/untied_gpt2_hf", "--to", "hf"}), 0) << log();
  EXPECT_NE(log().find("note: a GPT-2 with an output head of its own (tie_embeddings false): transformers' "
                       "GPT2LMHeadModel reads its lm_head.weight"),
            std::string::npos)
      << log();
}

// On a terminal a progress line is redrawn as the weights go through, and
// cleared before the summary; in a log there is none.
TEST_F(ConvertCli, OnATerminalProgressIsRedrawnThenCleared) {
  const TerminalRun t = run_hone_on_terminal({"convert", fixture("llama31_sharded"), dir_ + "/shown", "--to", "hf"});
  ASSERT_EQ(t.status, 0) << t.screen;
  EXPECT_NE(t.screen.find("\r\033[Kconverting: 15520 of 15520 parameters (100%)"), std::string::npos) << t.screen;
  // The fixture's tokenizer.json is a stand-in hone cannot read: a note says so, then the summary.
  EXPECT_NE(t.screen.find("\r\033[Knote: the tokenizer is copied but not read ("), std::string::npos) << t.screen;
  EXPECT_NE(t.screen.find("\nHugging Face llama folder "), std::string::npos) << t.screen;
  EXPECT_EQ(convert({fixture("llama31_sharded"), dir_ + "/logged", "--to", "hf"}), 0) << log();
  EXPECT_EQ(log().find("converting:"), std::string::npos) << log();
}

// Ctrl-C or SIGTERM stops before the next tensor: exit 128 + the signal, and
// neither the destination nor its unfinished temporary folder is left.
TEST_F(ConvertCli, AStopSignalLeavesNothingBehind) {
  // A llama2.c file of 238M zeros (sparse: made at once), which takes seconds to convert.
  const std::string big = dir_ + "/big.bin";
  {
    const int32_t header[7] = {1024, 2816, 16, 16, 16, 32000, 256};  // dim, hidden, layers, heads, kv heads, vocab, seq
    std::ofstream(big, std::ios::binary).write(reinterpret_cast<const char*>(header), sizeof(header));
  }
  const int64_t floats = 32000LL * 1024 + 16LL * (2 * 1024 + 4 * 1024 * 1024 + 3 * 1024 * 2816) + 1024 + 2 * 256 * 32;
  fs::resize_file(big, 7 * sizeof(int32_t) + uint64_t(floats) * sizeof(float));
  const auto leftovers = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) {
      const std::string name = e.path().filename().string();
      if (name.find("out") != std::string::npos) names.push_back(name);
    }
    return names;
  };
  for (const int signal : {SIGINT, SIGTERM}) {
    fs::remove(log_path());
    Process p = start_hone({"convert", big, dir_ + "/out", "--to", "hf"}, log_path());
    for (int i = 0; i < 20000 && leftovers().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_FALSE(leftovers().empty()) << "the conversion never started its folder: " << log();
    ::kill(p.pid, signal);
    ASSERT_EQ(wait_for(p), 128 + signal) << "finished before the signal? " << log();
    EXPECT_NE(log().find("hone: convert stopped by signal " + std::to_string(signal) + "; " + dir_ +
                         "/out not written"),
              std::string::npos)
        << log();
    EXPECT_EQ(leftovers(), std::vector<std::string>{}) << log();
  }
}

TEST_F(ConvertCli, BadInputsExitTwoWithOneLine) {
  auto expect_error = [&](const std::vector<std::string>& args, const std::string& fragment) {
    EXPECT_EQ(convert(args), 2) << log();
    const std::string text = log();
    EXPECT_NE(text.find(fragment), std::string::npos) << text;
    if (text.starts_with("hone: error: ")) {
      EXPECT_EQ(text.find('\n'), text.size() - 1) << "one line: " << text;
    }
  };
  expect_error({fixture("gpt2"), dir_ + "/x", "--to", "onnx"}, "--to");
  expect_error({fixture("gpt2"), dir_ + "/x"}, "--to");
  expect_error({dir_ + "/absent", dir_ + "/x", "--to", "hf"}, "hone: error: " + dir_ + "/absent: no such file");
  expect_error({fixture("gpt2"), dir_ + "/x", "--to", "hf", "--shard-size", "lots"}, "--shard-size: 'lots'");
  expect_error({fixture("gpt2"), dir_ + "/x", "--to", "hone", "--shard-size", "1MB"},
               "hone: error: --shard-size splits a Hugging Face export (--to hf)");
  expect_error({fixture("gpt2"), dir_ + "/x", "--to", "hf", "--tokenizer", fixture("gpt2/config.json")},
               "hone: error: --tokenizer " + fixture("gpt2/config.json") + ": a file, not a folder; give the folder");

  fs::create_directories(dir_ + "/broken");
  fs::copy_file(fixture("gpt2/model.safetensors"), dir_ + "/broken/model.safetensors");
  {
    std::ofstream config(dir_ + "/broken/config.json");
    config << R"({"model_type": "falcon", "hidden_size": 16})";
  }
  expect_error({dir_ + "/broken", dir_ + "/x", "--to", "hone"},
               "hone: error: " + dir_ + "/broken/config.json: unsupported model_type 'falcon'");
  fs::create_directories(dir_ + "/taken");
  { std::ofstream(dir_ + "/taken/file") << "x"; }
  expect_error({fixture("gpt2"), dir_ + "/taken", "--to", "hf"}, "already exists");
  // Nothing half-written: no destination, no temporary folder.
  EXPECT_FALSE(fs::exists(dir_ + "/x"));
  for (const auto& e : fs::directory_iterator(dir_)) EXPECT_FALSE(e.path().filename().string().starts_with("."));
}

}  // namespace
}  // namespace hone::test
