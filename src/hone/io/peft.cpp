#include "hone/io/peft.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "hone/io/atomic_file.hpp"
#include "hone/io/checkpoint.hpp"
#include "hone/io/hf.hpp"
#include "hone/io/json_file.hpp"
#include "hone/io/safetensors.hpp"
#include "hone/io/tensor_file.hpp"
#include "hone/io/weights.hpp"

namespace hone {

namespace fs = std::filesystem;

namespace {

constexpr const char* kPeftPrefix = "base_model.model.";
// DoRA's magnitudes: PEFT saves "MODULE.lora_magnitude_vector" (its module's
// ".weight" dropped, as it does for files of older versions) and reads both.
constexpr const char* kMagnitudeSuffix = ".lora_magnitude_vector";

// The Hugging Face module ("model.layers.3.self_attn.q_proj") whose weight
// holds the rows (output features) an adapter covers, which PEFT names it by,
// and where in its rows they start. GPT-2's c_attn and MPT's Wqkv hold q, k and
// v: PEFT adapts such a module with one adapter, one A and a B over all its rows.
// A Conv1D weight (GPT-2's, stored [in, out]) takes adapters of the same A [r,
// in] and B [out, r] as a Linear's (PEFT's fan_in_fan_out only transposes the
// merged product).
struct PeftRows {
  std::string module;
  int64_t offset = 0, module_rows = 0;
};

std::optional<PeftRows> peft_rows(const ModelConfig& config, const LoraTarget& t) {
  for (const HfTensor& h : hf_tensors_of(config, t.base)) {
    if (h.row_begin <= t.row_begin && t.row_begin + t.rows <= h.row_begin + h.rows)
      return PeftRows{h.name.substr(0, h.name.size() - std::string(".weight").size()), t.row_begin - h.row_begin,
                      h.rows};
  }
  return std::nullopt;
}

// The module whose weight is exactly an adapter's rows: what a PEFT export can
// name it by (hone's separate q, k and v adapters, each with its own A, are no
// one adapter of a fused module).
std::optional<std::string> peft_module(const ModelConfig& config, const LoraTarget& t) {
  const std::optional<PeftRows> p = peft_rows(config, t);
  if (!p || p->offset != 0 || p->module_rows != t.rows) return std::nullopt;
  return p->module;
}

// Each adapter with its PEFT module; an adapter PEFT cannot hold is an error naming `dir`.
std::vector<std::pair<LoraTarget, std::string>> peft_modules(const ModelConfig& config, const LoraConfig& lora,
                                                             const std::string& dir) {
  std::vector<std::pair<LoraTarget, std::string>> modules;
  for (const LoraTarget& t : lora_targets(config, lora)) {
    std::optional<std::string> module = peft_module(config, t);
    if (!module) {
      const std::vector<HfTensor> hf = hf_tensors_of(config, t.base);
      fail("{}: PEFT cannot hold the {} adapter of layer {}: Hugging Face stores {} as {}, which PEFT adapts with "
           "one adapter, not one per projection (export the merged model to a Hugging Face folder instead)",
           dir, t.module, t.layer, t.base, hf.empty() ? "nothing" : hf.front().name);
    }
    modules.emplace_back(t, std::move(*module));
  }
  return modules;
}

}  // namespace

void check_peft_export(const ModelConfig& config, const LoraConfig& lora, const std::string& dir) {
  check_new_folder(dir);
  peft_modules(config, lora, dir);
}

namespace {

// Every adapter hone can put on a model of `config`.
LoraConfig every_adapter(const ModelConfig& config, int64_t rank) {
  return {.rank = rank,
          .attn_modules = lora_attn_module_names(),
          .apply_to_mlp = true,
          .apply_to_output = !config.tie_embeddings};
}

// What target_modules names the adapted modules by. PEFT adapts every module
// whose name ends in a target: each is named by its last name ("q_proj"), or
// by as many of its last names as tell it from the modules not adapted (GPT-2's
// "mlp.c_proj" where attn.c_proj is not; "c_proj" would adapt both).
std::vector<std::string> target_modules(const ModelConfig& config, const std::set<std::string>& adapted) {
  std::set<std::string> others;
  for (const LoraTarget& t : lora_targets(config, every_adapter(config, 1))) {
    if (const std::optional<PeftRows> p = peft_rows(config, t); p && !adapted.contains(p->module)) {
      others.insert(p->module);
    }
  }
  const auto matches = [](const std::string& module, const std::string& target) {
    return module == target || module.ends_with("." + target);
  };
  std::set<std::string> targets;
  for (const std::string& module : adapted) {
    std::string target = module.substr(module.rfind('.') + 1);
    while (target != module && std::ranges::any_of(others, [&](const std::string& o) { return matches(o, target); })) {
      target = module.substr(module.rfind('.', module.size() - target.size() - 2) + 1);
    }
    targets.insert(target);
  }
  return {targets.begin(), targets.end()};
}

// `adapter(name)`: the adapter tensor of that hone name.
void write_peft(const ModelConfig& config, const LoraConfig& lora,
                const std::function<Tensor(const std::string&)>& adapter, const std::string& dir,
                const std::string& base_model) {
  std::vector<NamedTensor> tensors;
  std::set<std::string> modules;
  bool conv1d = false;  // GPT-2's weights, which PEFT marks fan_in_fan_out
  for (const auto& [t, module] : peft_modules(config, lora, dir)) {
    for (const HfTensor& h : hf_tensors_of(config, t.base)) conv1d = conv1d || h.transposed;
    modules.insert(module);
    tensors.push_back({kPeftPrefix + module + ".lora_A.weight", adapter(t.a_name())});
    tensors.push_back({kPeftPrefix + module + ".lora_B.weight", adapter(t.b_name())});
    if (lora.use_dora) tensors.push_back({kPeftPrefix + module + kMagnitudeSuffix, adapter(t.magnitude_name())});
  }
  const Json adapter_config = {{"base_model_name_or_path", base_model},
                               {"bias", "none"},
                               {"fan_in_fan_out", conv1d},
                               {"inference_mode", true},
                               {"init_lora_weights", true},
                               {"lora_alpha", lora.alpha},
                               {"lora_dropout", lora.dropout},
                               {"modules_to_save", nullptr},
                               {"peft_type", "LORA"},
                               {"r", lora.rank},
                               {"target_modules", target_modules(config, modules)},
                               {"task_type", "CAUSAL_LM"},
                               {"use_dora", lora.use_dora}};
  AtomicFolder folder(dir, /*replace=*/false);
  write_json_file(folder.file("adapter_config.json"), adapter_config);
  write_safetensors(folder.file("adapter_model.safetensors"), tensors, {{"format", "pt"}});
  folder.commit();
}

std::string adapter_weights_file(const std::string& dir) {
  for (const char* name : {"adapter_model.safetensors", "adapter_model.bin"}) {
    const fs::path p = fs::path(dir) / name;
    if (fs::exists(p)) return p.string();
  }
  fail("{}: no adapter_model.safetensors (or adapter_model.bin) beside adapter_config.json", dir);
}

// The layer an adapted module's name numbers ("model.layers.40.self_attn.q_proj":
// 40) where the same module of layer 0 is one hone adapts: an adapter made for
// a base with more layers than this one.
std::optional<int64_t> layer_past_the_model(const std::string& module,
                                            const std::map<std::string, std::vector<LoraTarget>>& by_module) {
  for (size_t start = module.find('.'); start != std::string::npos; start = module.find('.', start + 1)) {
    size_t end = start + 1;
    while (end < module.size() && std::isdigit(static_cast<unsigned char>(module[end]))) ++end;
    if (end == start + 1 || end == module.size() || module[end] != '.') continue;
    if (by_module.contains(module.substr(0, start + 1) + "0" + module.substr(end)))
      return std::stoll(module.substr(start + 1, end - start - 1));
  }
  return std::nullopt;
}

}  // namespace

bool is_peft_folder(const std::string& dir) {
  return !dir.empty() && fs::is_regular_file(fs::path(dir) / "adapter_config.json");
}

LoraConfig read_peft_config(const std::string& dir, const ModelConfig& config) {
  const std::string path = (fs::path(dir) / "adapter_config.json").string();
  const Json j = read_json_file(path);
  const auto field = [&](const char* key) -> const Json* {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  };
  const Json* type = field("peft_type");
  HONE_CHECK(type && *type == "LORA", "{}: peft_type is {}, hone reads LORA adapters", path,
             type ? type->dump() : "missing");
  const Json* r = field("r");
  const Json* alpha = field("lora_alpha");
  HONE_CHECK(r && r->is_number_integer() && r->get<int64_t>() > 0, "{}: 'r' must be a positive integer", path);
  HONE_CHECK(alpha && alpha->is_number(), "{}: 'lora_alpha' must be a number", path);
  // What PEFT can add to an adapter that hone's LoRA does not have. (Its
  // fan_in_fan_out says how the base weight is stored, not the adapters.)
  for (const char* key : {"rank_pattern", "alpha_pattern", "modules_to_save", "layers_to_transform"})
    HONE_CHECK(!field(key) || field(key)->empty(), "{}: '{}' is set; hone's adapters share one rank and alpha on "
               "every layer, and it trains no other modules", path, key);
  HONE_CHECK(!field("bias") || *field("bias") == "none", "{}: bias is {}; hone's adapters have no biases", path,
             field("bias")->dump());

  // The modules come from the tensors: each holds adapters hone can put on
  // this model (a fused module's: q's, k's and v's).
  const int64_t rank = r->get<int64_t>();
  std::map<std::string, std::vector<LoraTarget>> by_module;
  for (const LoraTarget& t : lora_targets(config, every_adapter(config, rank)))
    if (const auto p = peft_rows(config, t)) by_module[p->module].push_back(t);
  const std::unique_ptr<TensorFile> file = open_tensor_file(adapter_weights_file(dir));
  const bool dora = field("use_dora") && *field("use_dora") == true;
  std::map<std::string, std::vector<int64_t>> layers;  // hone module -> layers that have it
  for (const std::string& name : file->names()) {
    const std::string a_suffix = ".lora_A.weight", b_suffix = ".lora_B.weight";
    const std::string m_suffix = std::string(kMagnitudeSuffix), m_weight_suffix = m_suffix + ".weight";
    const bool a = name.ends_with(a_suffix), b = name.ends_with(b_suffix);
    const size_t m = name.ends_with(m_suffix) ? m_suffix.size() : name.ends_with(m_weight_suffix) ? m_weight_suffix.size() : 0;
    HONE_CHECK(name.starts_with(kPeftPrefix) && (a || b || m), "{}: '{}' is not a LoRA tensor (base_model.model.MODULE."
               "lora_A.weight, lora_B.weight or DoRA's lora_magnitude_vector)", file->path(), name);
    HONE_CHECK(!m || dora, "{}: '{}' is a DoRA magnitude, but adapter_config.json does not set use_dora", file->path(),
               name);
    const std::string module = name.substr(std::string(kPeftPrefix).size(),
                                           name.size() - std::string(kPeftPrefix).size() - (m ? m : a_suffix.size()));
    auto it = by_module.find(module);
    if (it == by_module.end()) {
      if (const std::optional<int64_t> layer = layer_past_the_model(module, by_module))
        fail("{}: '{}' adapts layer {}; this {} model has {} layers: the adapters were made for another base",
             file->path(), name, *layer, family_name(config.family), config.n_layers);
    }
    HONE_CHECK(it != by_module.end(), "{}: '{}' adapts {}, which hone's LoRA cannot adapt on a {} model (it adapts "
               "the attention projections, the MLP's and the output, where Hugging Face stores them apart)",
               file->path(), name, module, family_name(config.family));
    if (a)
      for (const LoraTarget& t : it->second) layers[t.module].push_back(t.layer);
  }
  LoraConfig lora{.rank = rank, .alpha = alpha->get<double>(), .attn_modules = {}, .use_dora = dora};
  if (const Json* rs = field("use_rslora"); rs && *rs == true) lora.alpha *= std::sqrt(double(rank));
  if (const Json* dropout = field("lora_dropout")) {
    HONE_CHECK(dropout->is_number(), "{}: 'lora_dropout' must be a number, got {}", path, dropout->dump());
    lora.dropout = dropout->get<double>();
  }
  for (const auto& [module, on] : layers) {
    const bool output = module == "output";
    HONE_CHECK(output || int64_t(on.size()) == config.n_layers, "{}: {} adapters on {} of {} layers; hone's are on "
               "every layer", file->path(), module, on.size(), config.n_layers);
    if (output) lora.apply_to_output = true;
    else if (std::find(lora_attn_module_names().begin(), lora_attn_module_names().end(), module) !=
             lora_attn_module_names().end())
      lora.attn_modules.push_back(module);
    else lora.apply_to_mlp = true;
  }
  HONE_CHECK(!layers.empty(), "{}: holds no adapters", file->path());
  // hone adapts all of the MLP's projections or none.
  for (const LoraTarget& t : lora_targets(config, lora))
    HONE_CHECK(!t.in_mlp() || layers.contains(t.module), "{}: adapters on some of the MLP's projections but not on "
               "{}; hone's are on all of them or none", file->path(), t.module);
  return lora;
}

namespace {

// The adapters of a PEFT folder by hone name, each checked against the shape the
// model gives it; a fused module's adapter gives q, k and v each its A and its rows of B.
AdapterReader peft_adapters(const std::string& dir, const ModelConfig& config, const LoraConfig& lora) {
  std::shared_ptr<const TensorFile> file = open_tensor_file(adapter_weights_file(dir));
  struct Stored {
    std::string name;
    Shape shape;  // as stored
    int64_t first_row = 0, rows = 0;  // the rows of it the adapter takes
  };
  auto names = std::make_shared<std::map<std::string, Stored>>();  // by hone name
  const std::vector<std::string> stored = file->names();
  const std::set<std::string> present(stored.begin(), stored.end());
  for (const LoraTarget& t : lora_targets(config, lora)) {
    const PeftRows p = *peft_rows(config, t);
    const std::string module = kPeftPrefix + p.module;
    (*names)[t.a_name()] = {module + ".lora_A.weight", Shape({lora.rank, t.in}), 0, lora.rank};
    (*names)[t.b_name()] = {module + ".lora_B.weight", Shape({p.module_rows, lora.rank}), p.offset, t.rows};
    if (lora.use_dora) {
      const std::string magnitude = module + kMagnitudeSuffix;
      (*names)[t.magnitude_name()] = {present.contains(magnitude) ? magnitude : magnitude + ".weight",
                                      Shape({p.module_rows}), p.offset, t.rows};
    }
  }
  return [file, names](const std::string& name) {
    const Stored& s = names->at(name);
    const TensorFile::Entry& e = file->entry(s.name);
    HONE_CHECK(e.shape == s.shape, "{}: '{}' is {}, the model needs {} (adapters of another base model?)",
               file->path(), s.name, e.shape.str(), s.shape.str());
    Tensor whole = Tensor::empty(s.shape, DType::f32, Device::cpu());
    read_stored({e.dtype, e.shape, e.bytes.data()}, whole);
    if (s.rows == s.shape[0]) return whole;
    // Rows [first_row, first_row + rows) of a matrix, or elements of a vector.
    const bool matrix = s.shape.ndim() == 2;
    const int64_t width = matrix ? s.shape[1] : 1;
    return whole.slice(s.first_row * width, matrix ? Shape({s.rows, width}) : Shape({s.rows})).clone();
  };
}

}  // namespace

LoraAdapters open_lora_adapters(const std::string& path, const std::string& base_path, const ModelConfig& base,
                                const WeightSource& weights) {
  HONE_CHECK(fs::exists(path),
             "{}: not found (LoRA adapters: a lora_finetune run or checkpoint folder, or a PEFT folder)", path);
  HONE_CHECK(fs::is_directory(path),
             "{}: a file; LoRA adapters are a folder: the PEFT folder that holds it (with adapter_config.json), or a "
             "lora_finetune run or checkpoint folder",
             path);
  HONE_CHECK(is_peft_folder(path) || !(fs::exists(fs::path(path) / "adapter_model.safetensors") ||
                                       fs::exists(fs::path(path) / "adapter_model.bin")),
             "{}: PEFT adapter weights without adapter_config.json, which says their rank, alpha and modules "
             "(PEFT's save_pretrained writes both)",
             path);
  const bool peft = is_peft_folder(path);
  const std::string folder = peft ? path : model_folder_of(path);
  const std::vector<std::string> merged = weights.merged_adapters();
  HONE_CHECK(std::find(merged.begin(), merged.end(), fs::weakly_canonical(folder).string()) == merged.end(),
             "{}: these LoRA adapters are already merged into {}: merging them again would add them twice",
             folder, weights.description());
  if (peft) {
    LoraConfig lora = read_peft_config(path, base);
    AdapterReader read = peft_adapters(path, base, lora);
    return {std::move(lora), std::move(read), folder, "the PEFT adapters of " + path, std::nullopt, {}};
  }
  TrainedLora trained = read_trained_lora(folder);
  check_adapters_base(folder, base);
  std::vector<std::string> notes;
  if (trained.base_model && !base_path.empty()) {
    if (const BaseModelRecord now = base_model_record(base_path); !same_base_model(now, *trained.base_model)) {
      notes.push_back(fmt::format("the adapters of {} were trained on {}, and are put on {} here", folder,
                                  describe(*trained.base_model), describe(now)));
    }
  }
  return {std::move(trained.lora), checkpoint_adapters(folder), folder, "the LoRA adapters of " + folder,
          std::move(trained.tokenizer), std::move(notes)};
}

void export_peft(const Transformer& model, const std::string& dir, const std::string& base_model) {
  HONE_CHECK(model.lora().has_value(), "{}: the model has no LoRA adapters to export", dir);
  write_peft(model.config(), *model.lora(),
             [&](const std::string& name) { return model.trainable_params().get(name).value; }, dir, base_model);
}

void export_peft(const std::string& checkpoint, const ModelConfig& config, const LoraConfig& lora,
                 const std::string& dir, const std::string& base_model) {
  const SafetensorsFile adapters(adapter_file(checkpoint));
  write_peft(config, lora, [&](const std::string& name) { return adapters.load(name); }, dir, base_model);
}

}  // namespace hone
