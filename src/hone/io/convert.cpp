#include "hone/io/convert.hpp"

#include <algorithm>
#include <filesystem>

#include "hone/io/c_checkpoints.hpp"
#include "hone/io/checkpoint.hpp"

namespace hone {

namespace fs = std::filesystem;

std::unique_ptr<WeightSource> open_weights(const std::string& path) {
  HONE_CHECK(fs::exists(path), "{}: no such file or folder", path);
  if (!fs::is_directory(path)) return open_c_checkpoint(path);
  if (fs::exists(fs::path(path) / "manifest.json")) return open_model_folder(path);
  if (fs::exists(fs::path(path) / "config.json")) return open_hf(path);
  if (auto latest = find_checkpoint(path, "latest")) return open_model_folder(*latest);
  fail("{}: not a model folder: no manifest.json (hone), config.json (Hugging Face) or latest (a hone run)", path);
}

ConvertSummary convert_model(const std::string& src, const std::string& dest, const ConvertOptions& options) {
  std::unique_ptr<WeightSource> source = open_weights(src);
  if (!options.tokenizer_dir.empty()) source = with_tokenizer_from(std::move(source), options.tokenizer_dir);
  ConvertSummary summary;
  summary.source = source->description();
  summary.config = source->config();
  summary.notes = source->notes();
  summary.dtype = options.dtype.value_or(source->stored_dtype());
  if (options.to == ModelFolderKind::hf) {
    summary.files = export_hf(*source, dest, {.dtype = summary.dtype, .shard_bytes = options.shard_bytes}).files;
  } else {
    save_model(*source, dest, summary.dtype);
    for (const auto& entry : fs::directory_iterator(dest)) summary.files.push_back(entry.path().filename().string());
    std::sort(summary.files.begin(), summary.files.end());
  }
  return summary;
}

}  // namespace hone
