#pragma once
// `hone convert`: any model hone reads, written as a Hugging Face folder or a
// hone model folder.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hone/io/hf.hpp"
#include "hone/io/weights.hpp"

namespace hone {

// The format of the model at `path`: "hone" (a model or checkpoint folder, or a
// run directory with a `latest`), "hf" (a folder with config.json), "meta" (a
// folder with params.json and consolidated.00.pth), "llmc", "llama2c" or "nanogpt" (a file).
std::string model_format(const std::string& path);
// Opens the model at `path`, of any format model_format names. With `format`
// other than "auto" (a config's checkpoint.format), a model of another format is
// refused, naming both.
std::unique_ptr<WeightSource> open_weights(const std::string& path, std::string_view format = "auto");

enum class ModelFolderKind { hf, hone };

struct ConvertOptions {
  ModelFolderKind to = ModelFolderKind::hf;
  std::optional<DType> dtype;            // default: as the source stores its weights
  uint64_t shard_bytes = 5'000'000'000;  // Hugging Face export only
  std::string tokenizer_dir;             // tokenizer files from here instead of the source's
  std::string adapter;                   // LoRA adapters merged in: a PEFT folder or a LoRA run's checkpoint
  ReadProgress on_progress;              // when set: called as the weights are read
  // Hugging Face export: the ids config.json names, those of the tokenizer among
  // the source's companion files (tokenizers are read a layer above this one).
  SpecialTokenIds special_tokens;
};

struct ConvertSummary {
  std::string source;  // the source's description
  ModelConfig config;
  DType dtype = DType::f32;
  std::vector<std::string> files;
  std::vector<std::string> notes;
};

// The model at `src` as convert_model reads it: with options.adapter merged in,
// the tokenizer of options.tokenizer_dir, reporting progress to options.on_progress.
std::unique_ptr<WeightSource> open_convert_source(const std::string& src, const ConvertOptions& options);

// Writes `dest` (which must not exist, or be an empty folder) completely or not at all.
ConvertSummary convert_model(const WeightSource& source, const std::string& dest, const ConvertOptions& options);
ConvertSummary convert_model(const std::string& src, const std::string& dest, const ConvertOptions& options);

}  // namespace hone
