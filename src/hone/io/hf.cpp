// Hugging Face model folders: reading (config.json, one file or index + shards,
// every tensor checked up front) and writing (what save_pretrained writes).
#include "hone/io/hf.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "hone/core/files.hpp"
#include "hone/data/tokenizers/loaders.hpp"
#include "hone/io/json_file.hpp"
#include "hone/io/safetensors.hpp"
#include "hone/ops/ops.hpp"

namespace hone {

namespace fs = std::filesystem;

namespace {

// A folder's weights as transformers looks for them: safetensors first, then
// PyTorch's torch.save archives; one file, or shards listed in an index.
struct WeightFiles {
  const char* single;
  const char* index;
};
constexpr WeightFiles kSafetensors{"model.safetensors", "model.safetensors.index.json"};
constexpr WeightFiles kPyTorch{"pytorch_model.bin", "pytorch_model.bin.index.json"};

int first_byte_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return in.get();
}

// `eos` (an id, a list of them, or null) with `ids` added, each once: generation
// stops at any of a list (as Llama 3 Instruct's config has it).
Json with_eos_ids(Json eos, const std::vector<int32_t>& ids) {
  for (const int32_t id : ids) {
    if (eos.is_null()) {
      eos = id;
    } else if (eos != id && !(eos.is_array() && std::ranges::count(eos, Json(id)) > 0)) {
      if (!eos.is_array()) eos = Json::array({eos});
      eos.push_back(id);
    }
  }
  return eos;
}

const char* architecture_of(Family family) {
  switch (family) {
    case Family::llama: return "LlamaForCausalLM";
    case Family::gpt2: return "GPT2LMHeadModel";
    case Family::mpt: return "MptForCausalLM";
  }
  HONE_ASSERT(false);
}

// Buffers that some checkpoints carry besides the weights (rotary frequencies,
// GPT-2's causal mask), and the output projection of a tied model.
bool ignorable(const ModelConfig& c, const std::string& name) {
  if (name.ends_with(".rotary_emb.inv_freq")) return true;
  if (c.family == Family::gpt2 && (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias"))) {
    return !name.ends_with(".c_attn.bias");
  }
  return c.tie_embeddings && name == "lm_head.weight";
}

class HfFolder final : public WeightSource {
 public:
  explicit HfFolder(const std::string& dir) : dir_(dir) {
    HONE_CHECK(fs::is_directory(dir), "{}: not a folder", dir);
    const std::string config_path = (fs::path(dir) / "config.json").string();
    HONE_CHECK(fs::exists(config_path), "{}: no config.json (not a Hugging Face model folder)", dir);
    hf_ = hf_config_from_json(read_json_file(config_path), config_path, folder_name(dir));
    open_weight_files();
    check_tensors();
    companions_ = companion_files_in(dir);
  }

  const ModelConfig& config() const override { return hf_.config; }
  DType stored_dtype() const override { return stored_dtype_; }
  std::vector<std::string> companion_files() const override { return companions_; }
  std::string description() const override {
    return fmt::format("Hugging Face {} folder {}", hf_.model_type, dir_);
  }
  std::vector<std::string> notes() const override { return hf_.notes; }

  void read(const std::string& name, const Tensor& dst) const override {
    const int64_t cols = dst.ndim() == 2 ? dst.size(1) : 1;
    for (const HfTensor& t : hf_tensors_of(hf_.config, name)) {
      const auto& [file, entry] = find(t.name);
      const StoredTensor stored{entry->dtype, entry->shape, entry->bytes.data()};
      const Tensor rows = dst.slice(t.row_begin * cols, dst.ndim() == 2 ? Shape{t.rows, cols} : Shape{t.rows});
      if (t.transposed) {
        read_stored_transposed(stored, rows);
      } else {
        read_stored(stored, rows);
      }
    }
  }

 private:
  void open_weight_files() {
    for (const WeightFiles& kind : {kSafetensors, kPyTorch}) {
      const fs::path single = fs::path(dir_) / kind.single, index = fs::path(dir_) / kind.index;
      if (fs::exists(single)) {  // transformers prefers the single file too
        weights_path_ = single.string();
        files_.push_back(open_tensor_file(single.string()));
        for (const std::string& name : files_[0]->names()) where_[name] = files_[0].get();
        return;
      }
      if (fs::exists(index)) return open_shards(index.string());
    }
    fail("{}: no {}, {}, {} or {}", dir_, kSafetensors.single, kSafetensors.index, kPyTorch.single, kPyTorch.index);
  }

  void open_shards(const std::string& index) {
    weights_path_ = index;
    const std::string index_name = fs::path(index).filename().string();
    const Json j = read_json_file(index);
    const JsonFields fields(j, index);
    HONE_CHECK(fields.has("weight_map") && j["weight_map"].is_object(), "{}: no 'weight_map' object", index);
    std::map<std::string, TensorFile*> by_file;
    for (auto& [tensor, file] : j["weight_map"].items()) {
      HONE_CHECK(file.is_string(), "{}: weight_map['{}'] is not a file name", index, tensor);
      const std::string name = file.get<std::string>();
      HONE_CHECK(!name.empty() && name.find('/') == std::string::npos && name.front() != '.',
                 "{}: weight_map['{}'] = '{}' is not a file in the folder", index, tensor, name);
      auto found = by_file.find(name);
      if (found == by_file.end()) {
        const fs::path shard = fs::path(dir_) / name;
        HONE_CHECK(fs::exists(shard), "{}: shard {} (listed in {}) is missing", shard.string(), name, index_name);
        files_.push_back(open_tensor_file(shard.string()));
        found = by_file.emplace(name, files_.back().get()).first;
      }
      HONE_CHECK(found->second->contains(tensor), "{}: has no tensor '{}', which {} places there",
                 found->second->path(), tensor, index_name);
      where_[tensor] = found->second;
    }
    // A shard's tensors that the index leaves out are checked as any other (an
    // unexpected one is an error), as they are in a single file.
    for (const auto& [name, file] : by_file) {
      for (const std::string& tensor : file->names()) where_.emplace(tensor, file);
    }
  }

  // A tensor by its save_pretrained name; GPT-2 and MPT files written from the
  // base model (GPT2Model) lack the "transformer." prefix.
  std::pair<const TensorFile*, const TensorFile::Entry*> find(const std::string& name) const {
    auto it = where_.find(name);
    if (it == where_.end() && name.starts_with("transformer.")) it = where_.find(name.substr(12));
    if (it == where_.end()) return {nullptr, nullptr};
    return {it->second, &it->second->entry(it->first)};
  }

  void check_tensors() {
    const ModelConfig& c = hf_.config;
    std::set<std::string> expected;
    for (const ParameterSpec& spec : parameter_specs(c)) {
      for (const HfTensor& t : hf_tensors_of(c, spec.name)) {
        const auto [file, entry] = find(t.name);
        HONE_CHECK(file != nullptr, "{}: tensor '{}' is missing (config.json describes a {} with {} layers)",
                   weights_path_, t.name, architecture_of(c.family), c.n_layers);
        HONE_CHECK(entry->dtype == DType::f32 || entry->dtype == DType::bf16 || entry->dtype == DType::f16,
                   "{}: tensor '{}' is {}; hone reads F32, BF16 and F16 weights", file->path(), t.name,
                   safetensors_dtype_name(entry->dtype));
        HONE_CHECK(entry->shape == t.shape, "{}: tensor '{}' has shape {}, config.json implies {}", file->path(),
                   t.name, entry->shape.str(), t.shape.str());
        if (expected.empty()) stored_dtype_ = entry->dtype;
        expected.insert(where_.count(t.name) ? t.name : t.name.substr(12));
      }
    }
    for (const auto& [name, file] : where_) {
      HONE_CHECK(expected.count(name) || ignorable(c, name),
                 "{}: unexpected tensor '{}' (a {} of this config.json has none; another architecture?)",
                 file->path(), name, architecture_of(c.family));
    }
  }

  std::string dir_;
  std::string weights_path_;  // the single file or the index
  HfConfig hf_;
  std::vector<std::unique_ptr<TensorFile>> files_;
  std::map<std::string, const TensorFile*> where_;
  DType stored_dtype_ = DType::f32;
  std::vector<std::string> companions_;
};

// One tensor of the export and the hone parameter it comes from (zeros: a
// bias the model does not have, which the architecture needs).
struct Planned {
  HfTensor tensor;
  const ParameterSpec* param;
  bool zeros = false;
};

}  // namespace

std::unique_ptr<WeightSource> open_hf(const std::string& dir) { return std::make_unique<HfFolder>(dir); }

ModelConfig read_hf_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  return hf_config_from_json(read_json_file(path), path, folder_name(dir)).config;
}

void load_hf_weights(const std::string& dir, Transformer& model) { load_weights(HfFolder(dir), model); }

SpecialTokenIds hf_config_special_ids(const std::string& path) {
  const fs::path config_path = fs::path(path) / "config.json";
  if (!fs::is_regular_file(config_path)) return {};
  return special_ids_in(read_json_file(config_path.string()));
}

SpecialTokenIds special_ids_in(const Json& config) {
  if (!config.is_object()) return {};
  // An id past int32 is no token's: left out, not cut down to another token's id.
  const auto id = [](const Json& v) -> std::optional<int32_t> {
    if (!v.is_number_integer()) return std::nullopt;
    const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(INT32_MAX)
                                             : v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX;
    return fits ? std::optional(v.get<int32_t>()) : std::nullopt;
  };
  SpecialTokenIds ids;
  ids.bos = id(config.value("bos_token_id", Json()));
  ids.pad = id(config.value("pad_token_id", Json()));
  const Json eos = config.value("eos_token_id", Json());
  if (!eos.is_array()) {
    ids.eos = id(eos);
  } else {
    for (const Json& e : eos) {
      if (!id(e)) continue;
      if (!ids.eos) ids.eos = id(e);
      else ids.more_eos.push_back(*id(e));
    }
  }
  return ids;
}

void check_hf_export(const ModelConfig& config, const std::string& dir) {
  check_new_folder(dir);
  hf_config_to_json(config, DType::f32);
}

HfExportSummary export_hf(const WeightSource& source, const std::string& dir, const HfExportOptions& options) {
  const ModelConfig& c = source.config();
  HfExportSummary summary;
  summary.dtype = options.dtype.value_or(source.stored_dtype());
  Json config = hf_config_to_json(c, summary.dtype);  // fails before anything is written
  HONE_CHECK(options.shard_bytes > 0, "the shard size must be positive");
  if (c.family == Family::gpt2 && !c.tie_embeddings) {
    summary.notes.push_back(
        "a GPT-2 with an output head of its own (tie_embeddings false): transformers' GPT2LMHeadModel reads its "
        "lm_head.weight (tie_word_embeddings false), but vLLM's GPT-2 ties the head to the embeddings whatever "
        "config.json says, and would compute another model");
  }
  const std::vector<std::string> companions = source.companion_files();

  // GPT2LMHeadModel always has biases: a GPT-2 without them (nanoGPT's
  // bias=False) is written with zero biases, which compute the same.
  ModelConfig exported = c;
  if (c.family == Family::gpt2 && !(c.norm_bias && c.linear_bias)) {
    exported.norm_bias = exported.linear_bias = true;
    summary.notes.push_back(fmt::format("GPT2LMHeadModel has biases, which this model has not{}: written as zeros",
                                        c.norm_bias ? " in its projections" : c.linear_bias ? " in its norms" : ""));
  }
  std::set<std::string> own;
  for (const ParameterSpec& spec : parameter_specs(c)) own.insert(spec.name);

  // Every tensor in order, then shards as save_pretrained cuts them: a new file
  // when the next tensor would take this one past the size limit.
  const std::vector<ParameterSpec> specs = parameter_specs(exported);
  std::vector<Planned> plan;
  for (const ParameterSpec& spec : specs) {
    for (HfTensor& t : hf_tensors_of(exported, spec.name)) plan.push_back({std::move(t), &spec, !own.contains(spec.name)});
  }
  std::vector<std::vector<const Planned*>> shards(1);
  uint64_t shard_bytes = 0;
  for (const Planned& p : plan) {
    const uint64_t bytes = uint64_t(p.tensor.shape.numel()) * dtype_size(summary.dtype);
    if (!shards.back().empty() && shard_bytes + bytes > options.shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(&p);
    shard_bytes += bytes;
    summary.tensor_bytes += bytes;
  }

  AtomicFolder folder(dir, false);
  const std::string* cached_name = nullptr;  // the parameter whose rows are being written
  Tensor cached;
  Json weight_map = Json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = shards.size() == 1 ? std::string(kSafetensors.single)
                                                : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1,
                                                              shards.size());
    std::vector<SafetensorsWriter::Layout> layout;
    for (const Planned* p : shards[s]) layout.push_back({p->tensor.name, summary.dtype, p->tensor.shape});
    // transformers refuses safetensors files without format "pt".
    SafetensorsWriter writer(folder.file(file), layout, {{"format", "pt"}});
    for (const Planned* p : shards[s]) {
      if (cached_name != &p->param->name) {
        cached = p->zeros ? Tensor::zeros(p->param->shape, DType::f32) : Tensor::empty(p->param->shape, DType::f32);
        if (!p->zeros) source.read(p->param->name, cached);
        cached_name = &p->param->name;
      }
      const HfTensor& t = p->tensor;
      const int64_t cols = cached.ndim() == 2 ? cached.size(1) : 1;
      const Tensor rows = cached.slice(t.row_begin * cols, cached.ndim() == 2 ? Shape{t.rows, cols} : Shape{t.rows});
      Tensor converted = ops::cast_to(rows, summary.dtype);
      if (t.transposed) {
        Tensor stored = Tensor::empty(t.shape, summary.dtype);
        transpose(converted, stored);
        converted = stored;
      }
      writer.write(converted);
      weight_map[t.name] = file;
      ++summary.tensors;
    }
    writer.commit();
    summary.files.push_back(file);
  }
  if (shards.size() > 1) {
    Json sorted = Json::object();  // save_pretrained sorts the map by tensor name
    std::map<std::string, std::string> by_name;
    for (auto& [name, file] : weight_map.items()) by_name[name] = file.get<std::string>();
    for (auto& [name, file] : by_name) sorted[name] = file;
    write_json_file(folder.file(kSafetensors.index), {{"metadata", {{"total_size", summary.tensor_bytes}}},
                                                      {"weight_map", sorted}});
    summary.files.push_back(kSafetensors.index);
  }

  Json special_ids = Json::object();
  const SpecialTokenIds& ids = options.special_tokens;
  const std::pair<const char*, std::optional<int32_t>> given[] = {
      {"bos_token_id", ids.bos}, {"eos_token_id", ids.eos}, {"pad_token_id", ids.pad}};
  for (const auto& [key, id] : given) {
    if (id) special_ids[key] = *id;
  }
  std::optional<Json> generation;  // a companion generation_config.json, from `generation_path`
  std::string generation_path;
  std::optional<std::string> chat_template;  // a companion chat_template.jinja's text
  std::string tokenizer_config_path;         // a companion tokenizer_config.json, written below
  std::string tiktoken_path;                 // a companion tiktoken rank file
  for (const std::string& path : companions) {
    const std::string name = companion_name(path);
    if (name == "chat_template.jinja") chat_template = read_file(path);
    if (name == "tokenizer_config.json") {
      tokenizer_config_path = path;
      continue;
    }
    if (name == "generation_config.json") {
      generation = read_json_file(path);
      generation_path = path;
      HONE_CHECK(generation->is_object(), "{}: not a JSON object", path);
      for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
        if (generation->contains(key)) special_ids[key] = (*generation)[key];
      }
      continue;  // written below
    }
    // tiktoken's rank file (Llama 3's tokenizer.model) where transformers and
    // llama.cpp's converter look for a SentencePiece model breaks both: Meta's
    // Hugging Face repos keep it in original/, and so does the export.
    const bool sentencepiece = name != "tokenizer.model" || first_byte_of(path) == 0x0A;  // a ModelProto's field 1
    const std::string stored = sentencepiece ? name : "original/" + name;
    if (!sentencepiece) {
      fs::create_directories(fs::path(folder.file(stored)).parent_path());
      tiktoken_path = path;
    }
    copy_file(path, folder.file(stored));
    summary.files.push_back(stored);
  }
  // The rank file alone (Meta's own Llama 3 folders): transformers and vLLM
  // need a tokenizer.json, made from it as transformers' converter makes it.
  const auto written = [&](const char* name) { return std::ranges::count(summary.files, name) > 0; };
  std::optional<Json> converted_config;
  if (!tiktoken_path.empty() && !written("tokenizer.json")) {
    // Llama 3.1's RoPE scaling came with its special tokens' names.
    const HfTokenizerFiles converted = tiktoken_as_hf_tokenizer(
        read_file(tiktoken_path), tiktoken_path,
        tokenizer_config_path.empty() ? std::string() : read_file(tokenizer_config_path), c.max_seq_len,
        c.rope_scaling.enabled() ? Llama3Release::llama31 : Llama3Release::llama3);
    AtomicFile tokenizer_json(folder.file("tokenizer.json"));
    tokenizer_json.write(converted.tokenizer.dump(2) + "\n");
    tokenizer_json.commit();
    summary.files.push_back("tokenizer.json");
    converted_config = Json(converted.config);
  }
  if (!ids.more_eos.empty()) {
    special_ids["eos_token_id"] = with_eos_ids(special_ids.value("eos_token_id", Json()), ids.more_eos);
  }
  config.update(special_ids);  // transformers reads the ids in config.json too
  // GPT-2's BPE files alone: transformers picks a tokenizer class by the model
  // type, which for a Llama or MPT would look for files that are not there.
  const bool gpt2_files_alone = written("vocab.json") && written("merges.txt") && !written("tokenizer.json") &&
                                tokenizer_config_path.empty();
  if (chat_template || gpt2_files_alone || (converted_config && tokenizer_config_path.empty())) {
    Json tokenizer_config = Json::object();
    if (!tokenizer_config_path.empty()) {
      tokenizer_config = read_json_file(tokenizer_config_path);
      HONE_CHECK(tokenizer_config.is_object(), "{}: not a JSON object", tokenizer_config_path);
    } else if (converted_config) {
      tokenizer_config = *converted_config;
    } else if (gpt2_files_alone) {
      tokenizer_config = {{"tokenizer_class", "GPT2Tokenizer"}, {"model_max_length", c.max_seq_len}};
    }
    if (chat_template) {
      // transformers' later releases read chat_template.jinja first, earlier ones
      // (and other readers) only tokenizer_config.json's: both say the same.
      Json& templates = tokenizer_config["chat_template"];
      if (templates.is_array()) {  // named templates: the file is the default one
        for (Json& named : templates)
          if (named.value("name", "") == "default") named["template"] = *chat_template;
      } else {
        templates = *chat_template;
      }
    }
    write_json_file(folder.file("tokenizer_config.json"), tokenizer_config);
    summary.files.push_back("tokenizer_config.json");
  } else if (!tokenizer_config_path.empty()) {
    copy_file(tokenizer_config_path, folder.file("tokenizer_config.json"));
    summary.files.push_back("tokenizer_config.json");
  }
  if (!generation) {
    // What GenerationConfig.from_model_config writes.
    generation = Json::object({{"_from_model_config", true}});
    generation->update(special_ids);
    (*generation)["transformers_version"] = config["transformers_version"];
    write_json_file(folder.file("generation_config.json"), *generation);
  } else if (special_ids.contains("eos_token_id") &&
             generation->value("eos_token_id", Json()) != special_ids["eos_token_id"]) {
    (*generation)["eos_token_id"] = special_ids["eos_token_id"];  // with the end of an answer added
    write_json_file(folder.file("generation_config.json"), *generation);
  } else {
    copy_file(generation_path, folder.file("generation_config.json"));
  }
  summary.files.push_back("generation_config.json");
  write_json_file(folder.file("config.json"), config);
  summary.files.push_back("config.json");
  folder.commit();
  return summary;
}

HfExportSummary export_hf(const Transformer& model, const std::string& dir, const HfExportOptions& options) {
  return export_hf(*transformer_weights(model), dir, options);
}

}  // namespace hone
