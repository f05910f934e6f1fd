#include "hone/io/convert.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "hone/io/c_checkpoints.hpp"
#include "hone/io/checkpoint.hpp"
#include "hone/io/meta.hpp"
#include "hone/io/nanogpt.hpp"
#include "hone/io/peft.hpp"
#include "hone/io/torch_file.hpp"

namespace hone {

namespace fs = std::filesystem;

namespace {

// Whether the file starts as a pickle of protocol 2 to 5 does: PROTO, the
// protocol, an opcode (a llama2.c header's dim of 640 starts 80 02 00).
bool is_pickle(const std::string& path) {
  unsigned char start[3] = {};
  std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(start), sizeof start);
  return start[0] == 0x80 && start[1] >= 2 && start[1] <= 5 && start[2] != 0;
}

}  // namespace

std::string model_format(const std::string& path) {
  HONE_CHECK(fs::exists(path), "{}: no such file or folder", path);
  if (!fs::is_directory(path)) {
    if (is_torch_archive(path)) {
      // A torch.save archive of weights alone has no config to build the model from.
      HONE_CHECK(is_nanogpt_checkpoint(path),
                 "{}: a PyTorch archive (torch.save) holding weights but no model config (not a nanoGPT ckpt.pt, "
                 "whose model_args say it): hone reads one as a Hugging Face folder's pytorch_model.bin, beside the "
                 "folder's config.json",
                 path);
      return "nanogpt";
    }
    // A file of a model folder: the folder is the model.
    const std::string name = fs::path(path).filename().string();
    HONE_CHECK(!name.ends_with(".safetensors") && !name.ends_with(".json"),
               "{}: a file of a model folder ({}): give the folder that holds it", path,
               name.ends_with(".json") ? "a config or index" : "weights");
    HONE_CHECK(!is_pickle(path), "{}: a pickle, not a model file (nanoGPT's meta.pkl is a tokenizer: tokenizer.path; "
               "torch.save's legacy format, before PyTorch 1.6: load it and save it again with torch.save)", path);
    return c_checkpoint_format(path);
  }
  if (fs::exists(fs::path(path) / "manifest.json")) return "hone";
  if (fs::exists(fs::path(path) / "config.json")) return "hf";
  if (is_meta_folder(path)) return "meta";
  if (find_checkpoint(path, "latest")) return "hone";
  HONE_CHECK(!fs::exists(fs::path(path) / "adapter_config.json"),
             "{}: PEFT adapters, not a model: give them as lora.adapter (hone convert: --adapter) with their base "
             "model as the model",
             path);
  fail("{}: not a model folder: no manifest.json (hone), config.json (Hugging Face), params.json and "
       "consolidated.00.pth (Meta) or latest (a hone run)",
       path);
}

std::unique_ptr<WeightSource> open_weights(const std::string& path, std::string_view format) {
  const std::string found = model_format(path);
  HONE_CHECK(format == "auto" || format == found, "{}: checkpoint.format is {}, but this is {}", path, format,
             found == "hone"   ? "a hone model or checkpoint folder (manifest.json)"
             : found == "hf"   ? "a Hugging Face folder (config.json)"
             : found == "meta" ? "a Meta Llama folder (params.json, consolidated.00.pth)"
             : found == "llmc" ? "an llm.c checkpoint"
             : found == "nanogpt" ? "a nanoGPT checkpoint (ckpt.pt)"
                               : "a llama2.c checkpoint");
  if (found == "hf") return open_hf(path);
  if (found == "meta") return open_meta(path);
  if (found == "llmc" || found == "llama2c") return open_c_checkpoint(path);
  if (found == "nanogpt") return open_nanogpt(path);
  const std::string folder = model_folder_of(path);
  if (!is_lora_checkpoint(folder)) return open_model_folder(folder);
  // A LoRA run's checkpoint holds adapters: the model is its base with them merged.
  const TrainedLora trained = read_trained_lora(folder);
  HONE_CHECK(fs::exists(trained.base),
             "{}: the checkpoint of a LoRA run, whose base model {} (where the run's checkpoint.path led) is not found "
             "from here: run from where the run was started, or merge onto a base (hone convert's --adapter, a recipe's "
             "lora.adapter)",
             folder, trained.base);
  if (trained.base_model) {
    const BaseModelRecord now = base_model_record(trained.base);
    HONE_CHECK(same_base_model(now, *trained.base_model),
               "{}: the checkpoint of a LoRA run, whose base model has changed since the run: it trained on {}, the "
               "folder holds {} now (a run resumed from an earlier step wrote it again?): merge onto a base with "
               "lora.adapter",
               folder, describe(*trained.base_model), describe(now));
  }
  std::unique_ptr<WeightSource> base = open_weights(trained.base, trained.base_format);
  check_adapters_base(folder, base->config());
  return merge_adapters(std::move(base), trained.lora, checkpoint_adapters(folder), folder,
                        "the LoRA adapters of " + folder);
}

std::unique_ptr<WeightSource> open_convert_source(const std::string& src, const ConvertOptions& options) {
  std::unique_ptr<WeightSource> source = open_weights(src);
  if (!options.adapter.empty()) {
    LoraAdapters adapters = open_lora_adapters(options.adapter, src, source->config(), *source);
    source = merge_adapters(std::move(source), adapters.lora, std::move(adapters.read), adapters.folder,
                            adapters.description, std::move(adapters.notes));
  }
  if (!options.tokenizer_dir.empty()) source = with_tokenizer_from(std::move(source), options.tokenizer_dir);
  if (options.on_progress) source = with_read_progress(std::move(source), options.on_progress);
  return source;
}

ConvertSummary convert_model(const WeightSource& source, const std::string& dest, const ConvertOptions& options) {
  ConvertSummary summary;
  summary.source = source.description();
  summary.config = source.config();
  summary.notes = source.notes();
  summary.dtype = options.dtype.value_or(source.stored_dtype());
  if (options.to == ModelFolderKind::hf) {
    HfExportSummary exported = export_hf(
        source, dest,
        {.dtype = summary.dtype, .shard_bytes = options.shard_bytes, .special_tokens = options.special_tokens});
    summary.files = std::move(exported.files);
    summary.notes.insert(summary.notes.end(), exported.notes.begin(), exported.notes.end());
  } else {
    save_model(source, dest, summary.dtype);
    for (const auto& entry : fs::directory_iterator(dest)) summary.files.push_back(entry.path().filename().string());
    std::sort(summary.files.begin(), summary.files.end());
  }
  return summary;
}

ConvertSummary convert_model(const std::string& src, const std::string& dest, const ConvertOptions& options) {
  return convert_model(*open_convert_source(src, options), dest, options);
}

}  // namespace hone
