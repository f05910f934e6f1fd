// hone convert SRC DEST --to hf|hone [--dtype fp32|bf16|fp16] [--shard-size 5GB] [--tokenizer DIR]
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <optional>
#include <fmt/ranges.h>

#include "hone/cli/commands.hpp"
#include "hone/core/progress_line.hpp"
#include "hone/core/error.hpp"
#include "hone/core/stop_signals.hpp"
#include "hone/core/text.hpp"
#include "hone/data/tokenizers/tokenizer.hpp"
#include "hone/io/convert.hpp"
#include "hone/io/peft.hpp"
#include "hone/io/checkpoint.hpp"
#include "hone/train/inference.hpp"

namespace hone::cli {

namespace {

// "5GB" (10^9, as transformers' max_shard_size), "2GiB" (2^30), "500MB", "1000000".
uint64_t parse_size(const std::string& text) {
  double number = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
  std::string unit(end, text.data() + text.size());
  for (char& ch : unit) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  const std::pair<const char*, double> units[] = {{"", 1},         {"B", 1},           {"KB", 1e3},
                                                  {"MB", 1e6},     {"GB", 1e9},        {"KIB", 1024.0},
                                                  {"MIB", 1048576.0}, {"GIB", 1073741824.0}};
  for (const auto& [name, scale] : units) {
    if (error == std::errc() && unit == name && number * scale >= 1 && number * scale < 1e18) {
      return uint64_t(number * scale);
    }
  }
  fail("--shard-size: '{}' is not a size such as 5GB, 500MB, 2GiB or a number of bytes", text);
}

// The special ids of the tokenizer among the model's companion files, for
// config.json, with the token a hone fine-tuning run (`trained_dataset`, its
// dataset keys) ended its answers with among the EOS ids, as its export.hf does.
// A tokenizer hone cannot read is copied all the same, with a note; one with ids
// past the model's vocabulary is refused.
// The folder of the tokenizer among the source's companion files; none for no
// tokenizer (e.g. a generation_config.json alone).
std::optional<std::filesystem::path> tokenizer_folder_of(const WeightSource& source) {
  const std::vector<std::string> files = source.companion_files();
  if (files.empty()) return std::nullopt;
  const std::filesystem::path dir = std::filesystem::path(files.front()).parent_path();
  return tokenizer_files_in(dir).empty() ? std::nullopt : std::optional(dir);
}

SpecialTokenIds check_tokenizer(const WeightSource& source, const Json& trained_dataset,
                                std::vector<std::string>& notes) {
  const std::optional<std::filesystem::path> folder = tokenizer_folder_of(source);
  if (!folder) return {};
  const std::filesystem::path& dir = *folder;
  std::unique_ptr<Tokenizer> tokenizer;
  try {
    tokenizer = load_tokenizer(dir);
  } catch (const Error& e) {
    notes.push_back(fmt::format("the tokenizer is copied but not read ({}), so config.json names no special token ids",
                                e.what()));
    return {};
  }
  check_fits_vocabulary(*tokenizer, source.config().vocab_size, dir.string());
  SpecialTokenIds ids{tokenizer->bos_id(), tokenizer->eos_id(), tokenizer->pad_id()};
  if (trained_dataset.is_object()) {
    if (const auto end = data::end_of_answer_token(*tokenizer, prompt_format_of(trained_dataset))) {
      ids.more_eos.push_back(*end);
    }
  }
  return ids;
}

// A lora_finetune run's (or checkpoint's) adapters as a PEFT folder, with the
// base it trained on as base_model_name_or_path.
int convert_to_peft(const std::string& src, const std::string& dest) {
  const std::string folder = model_folder_of(src);
  HONE_CHECK(is_lora_checkpoint(folder), "{}: --to peft takes a lora_finetune run or checkpoint folder (its "
             "adapters); this is {}", src, folder == src ? "no LoRA checkpoint" : folder + ", no LoRA checkpoint");
  const TrainedLora trained = read_trained_lora(folder);
  // The adapters alone are written: the base need not be found from here.
  export_peft(folder, read_model_config(folder), trained.lora, dest, trained.base);
  fmt::print("the LoRA adapters of {} -> {} (PEFT folder, base_model_name_or_path {})\n", folder, dest, trained.base);
  if (!std::filesystem::exists(trained.base)) {
    fmt::print("note: the base, {}, is not found from here: PEFT loads it from where it runs\n", trained.base);
  } else if (model_format(trained.base) != "hf") {
    fmt::print("note: the base, {}, is no Hugging Face model: give PEFT the base as one (hone convert {} DIR --to "
               "hf)\n",
               trained.base, trained.base);
  }
  return 0;
}

}  // namespace

Command add_convert(CLI::App& app) {
  struct Args {
    std::string src, dest, to, dtype, shard_size = "5GB", tokenizer, adapter;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "convert", "Convert a model: Hugging Face folder, Meta Llama folder, hone model or checkpoint folder, llm.c "
                 "or llama2.c file, nanoGPT ckpt.pt -> Hugging Face or hone folder");
  sub->add_option("src", args->src, "A Hugging Face folder, a Meta Llama folder (params.json, consolidated.00.pth), "
                                    "a hone model/checkpoint folder or run directory, an llm.c / llama2.c .bin "
                                    "file, or a nanoGPT ckpt.pt")
      ->required()
      ->check(non_empty_path());
  sub->add_option("dest", args->dest, "The folder to write (must not exist, or be empty)")
      ->required()
      ->check(non_empty_path());
  sub->add_option("--to", args->to,
                  "hf: a Hugging Face folder; hone: a hone model folder; peft: the adapters of a lora_finetune run "
                  "or checkpoint as a PEFT folder (any step's, as its export.peft writes the last)")
      ->required()
      ->check(CLI::IsMember({"hf", "hone", "peft"}));
  sub->add_option("--dtype", args->dtype, "Weights in fp32, bf16 or fp16 (default: as the source stores them)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  CLI::Option* shard_size = sub->add_option(
      "--shard-size", args->shard_size,
      "Hugging Face export: split the weights into files of at most this size (default 5GB)");
  sub->add_option("--tokenizer", args->tokenizer,
                  "Copy the tokenizer files of this folder (tokenizer.json, tokenizer.model, vocab.json, ...) "
                  "instead of the source's");
  sub->add_option("--adapter", args->adapter,
                  "Merge LoRA adapters into the model: a PEFT folder (adapter_config.json) or a lora_finetune "
                  "checkpoint or run directory");
  return [args, shard_size, sub] {
    if (args->to == "peft") {
      for (const char* option : {"--dtype", "--shard-size", "--tokenizer", "--adapter"}) {
        HONE_CHECK(sub->count(option) == 0, "{} is for a model's conversion; --to peft writes a LoRA run's adapters "
                   "as they are", option);
      }
      return convert_to_peft(args->src, args->dest);
    }
    // A hone model folder is one model.safetensors: a size for its shards would be ignored.
    HONE_CHECK(args->to == "hf" || shard_size->count() == 0,
               "--shard-size splits a Hugging Face export (--to hf); --to hone writes one model.safetensors");
    ConvertOptions options;
    options.to = args->to == "hf" ? ModelFolderKind::hf : ModelFolderKind::hone;
    if (!args->dtype.empty()) options.dtype = parse_dtype(args->dtype);
    options.shard_bytes = parse_size(args->shard_size);
    HONE_CHECK(args->tokenizer.empty() || std::filesystem::is_directory(args->tokenizer),
               "--tokenizer {}: {}; give the folder of the tokenizer's files (tokenizer.json, tokenizer.model, "
               "vocab.json, ...)",
               args->tokenizer, std::filesystem::exists(args->tokenizer) ? "a file, not a folder" : "no such folder");
    options.tokenizer_dir = args->tokenizer;
    options.adapter = args->adapter;
    // Large models take minutes: a line redrawn as their weights go through.
    // Ctrl-C or a kill stops before the next tensor, and the unfinished folder
    // is removed as on any error.
    catch_stop_signals();
    ParameterProgress progress("converting");
    options.on_progress = [&](int64_t read, int64_t total) {
      if (stop_requested_flag()) throw Stopped{};
      progress.update(read, total);
    };
    const std::unique_ptr<WeightSource> source = open_convert_source(args->src, options);
    std::vector<std::string> tokenizer_notes;
    options.special_tokens =
        check_tokenizer(*source, fine_tuning_dataset_of(args->src, args->adapter).first, tokenizer_notes);
    const SpecialTokenIds& ids = options.special_tokens;
    if (!ids.bos && !ids.eos && !ids.pad) options.special_tokens = hf_config_special_ids(args->src);
    if (options.to == ModelFolderKind::hf && tokenizer_notes.empty() && !options.special_tokens.bos &&
        !options.special_tokens.eos) {
      // What transformers' config class of the family takes where config.json names none.
      const Family family = source->config().family;
      tokenizer_notes.push_back(fmt::format(
          "config.json and generation_config.json name no BOS or EOS id: {}, and transformers takes its config "
          "class's defaults instead ({})",
          tokenizer_folder_of(*source) ? "its tokenizer has none (as nanoGPT's characters have none)"
                                       : "the source has no tokenizer hone reads (give --tokenizer DIR)",
          family == Family::llama  ? "LlamaConfig's BOS 1, EOS 2"
          : family == Family::gpt2 ? "GPT2Config's BOS and EOS 50256"
                                   : "MptConfig's: none"));
    }
    ConvertSummary s;
    try {
      s = convert_model(*source, args->dest, options);
    } catch (const Stopped&) {
      progress.clear();
      fmt::print(stderr, "hone: convert stopped by signal {}; {} not written\n", stop_signal(), args->dest);
      return 128 + stop_signal();
    }
    progress.clear();
    for (const std::string& note : s.notes) fmt::print("note: {}\n", note);
    for (const std::string& note : tokenizer_notes) fmt::print("note: {}\n", note);
    fmt::print("{} ({}, {} layers, {} parameters) -> {} ({} folder, {} weights): {}\n", s.source,
               family_name(s.config.family), s.config.n_layers, format_count(s.config.num_params()), args->dest, args->to,
               dtype_name(s.dtype), fmt::join(s.files, ", "));
    return 0;
  };
}

}  // namespace hone::cli
