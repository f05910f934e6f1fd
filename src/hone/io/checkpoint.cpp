#include "hone/io/checkpoint.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "hone/config/config.hpp"
#include "hone/core/text.hpp"
#include "hone/io/atomic_file.hpp"
#include "hone/io/json_file.hpp"
#include "hone/io/model_json.hpp"
#include "hone/io/safetensors.hpp"
#include "hone/ops/ops.hpp"

namespace hone {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "hone-checkpoint";
constexpr int kVersion = 1;
constexpr const char* kLatest = "latest";
constexpr const char* kWeights = "model.safetensors";
constexpr const char* kModelJson = "model.json";
constexpr const char* kOptimizer = "optimizer.safetensors";
// A LoRA run's checkpoint holds its adapters instead of the (frozen, unchanged) base weights.
constexpr const char* kAdapter = "adapter.safetensors";
constexpr const char* kTrainerState = "trainer_state.json";

// An error naming the first tensor of `file` that is not one of `expected` (a
// checkpoint's files hold exactly what the model and optimizer need).
void check_no_other_tensors(const SafetensorsFile& file, const std::set<std::string>& expected, std::string_view what) {
  for (const std::string& name : file.names()) {
    HONE_CHECK(expected.contains(name), "{}: unexpected tensor '{}' ({} has none of that name; another architecture?)",
               file.path(), name, what);
  }
}

// The files of a folder being written and their sizes and checksums, which go
// into the manifest, written last: a folder without one is not a checkpoint.
class Manifest {
 public:
  void add(const std::string& file, const WrittenFile& w) {
    files_[file] = {{"bytes", w.bytes}, {"xxh3_64", checksum_hex(w.checksum)}};
  }
  void write(const AtomicFolder& folder, Json extra = Json::object()) const {
    Json manifest = {{"format", kFormat}, {"version", kVersion}};
    for (auto& [key, value] : extra.items()) manifest[key] = value;
    manifest["files"] = files_;
    write_json_file(folder.file("manifest.json"), manifest);
  }

 private:
  Json files_ = Json::object();
};

// step_NNNNNNN folders under run_dir, by step.
std::vector<std::pair<int64_t, fs::path>> checkpoints_in(const std::string& run_dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  for (const auto& entry : fs::directory_iterator(run_dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || !name.starts_with("step_")) continue;
    char* end = nullptr;
    const long long step = std::strtoll(name.c_str() + 5, &end, 10);
    if (*end == '\0') found.emplace_back(step, entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

// A model or checkpoint folder's weights, by hone name, read from the mapped file.
class ModelFolder final : public WeightSource {
 public:
  // `fallback` is the config of a checkpoint written before folders had model.json.
  ModelFolder(const std::string& folder, const ModelConfig* fallback) : folder_(folder) {
    verify_checkpoint(folder);
    config_ = fallback && !fs::exists(fs::path(folder) / kModelJson) ? *fallback : read_model_config(folder);
    weights_ = std::make_unique<SafetensorsFile>((fs::path(folder) / kWeights).string());
    const std::vector<ParameterSpec> specs = parameter_specs(config_);
    std::set<std::string> names;
    for (const ParameterSpec& spec : specs) {
      names.insert(spec.name);
      HONE_CHECK(weights_->contains(spec.name), "{}: no tensor '{}' (the model in {} needs it)", weights_->path(),
                 spec.name, kModelJson);
      const SafetensorsFile::Entry& e = weights_->entry(spec.name);
      HONE_CHECK(e.shape == spec.shape && (e.dtype == DType::f32 || e.dtype == DType::bf16 || e.dtype == DType::f16),
                 "{}: '{}' is {} {}, the model needs {} (fp32, bf16 or fp16)", weights_->path(), spec.name,
                 dtype_name(e.dtype), e.shape.str(), spec.shape.str());
    }
    check_no_other_tensors(*weights_, names, "the model in " + std::string(kModelJson));
    stored_dtype_ = weights_->entry(specs.front().name).dtype;
    companions_ = companion_files_in(folder);
  }

  const ModelConfig& config() const override { return config_; }
  DType stored_dtype() const override { return stored_dtype_; }
  std::vector<std::string> companion_files() const override { return companions_; }
  std::string description() const override { return "hone model folder " + folder_; }
  void read(const std::string& name, const Tensor& dst) const override {
    const SafetensorsFile::Entry& e = weights_->entry(name);
    read_stored({e.dtype, e.shape, e.bytes.data()}, dst);
  }

 private:
  std::string folder_;
  ModelConfig config_;
  std::unique_ptr<SafetensorsFile> weights_;
  DType stored_dtype_ = DType::f32;
  std::vector<std::string> companions_;
};

// The folder as given, and absolute: a relative one is found from another
// working directory too.
Json base_model_to_json(const std::optional<BaseModelRecord>& base) {
  if (!base) return Json();
  return {{"folder", base->folder},
          {"absolute_folder", base->absolute_folder.empty() ? Json() : Json(base->absolute_folder)},
          {"weights_xxh3", base->weights_xxh3 ? Json(*base->weights_xxh3) : Json()}};
}

}  // namespace

std::string checkpoint_folder_name(int64_t step) { return fmt::format("step_{:07d}", step); }

std::string checkpoint_temp_folder(const std::string& run_dir, int64_t step) {
  return (fs::path(run_dir) / fmt::format(".{}.tmp", checkpoint_folder_name(step))).string();
}

namespace {

constexpr std::string_view kRemovedSuffix = ".removed";

// A step folder goes (past keep_last_n, or saved again after a resume) by a
// rename out of the run's sight first: a kill while its files are deleted
// leaves no step folder whose manifest lists files that are gone.
void remove_checkpoint_folder(const fs::path& folder) {
  const fs::path removed = folder.parent_path() / ("." + folder.filename().string() + std::string(kRemovedSuffix));
  fs::remove_all(removed);
  fs::rename(folder, removed);
  fs::remove_all(removed);
}

}  // namespace

TemporaryCheckpointFolder::TemporaryCheckpointFolder(const std::string& run_dir, int64_t step)
    : path_(checkpoint_temp_folder(run_dir, step)) {
  // What killed saves and removals left, of any step (one the run never saves again stayed).
  if (fs::is_directory(run_dir)) {
    for (const auto& entry : fs::directory_iterator(run_dir)) {
      const std::string name = entry.path().filename().string();
      if (name.starts_with(".step_") && (name.ends_with(".tmp") || name.ends_with(kRemovedSuffix))) {
        fs::remove_all(entry.path());
      }
    }
  }
  fs::create_directories(path_);
}

TemporaryCheckpointFolder::~TemporaryCheckpointFolder() {
  std::error_code ignored;  // a destructor that runs while an error unwinds must not throw
  fs::remove_all(path_, ignored);
}

std::string optimizer_shard_file(int rank, int world) {
  return fmt::format("optimizer-{:05d}-of-{:05d}.safetensors", rank, world);
}

std::optional<std::pair<std::string, WrittenFile>> write_optimizer_state(const std::string& dir,
                                                                         const Transformer& model,
                                                                         const AdamW& optimizer, int rank, int world) {
  const ParameterSet& trained = model.trainable_params();
  if (optimizer.holds_everything()) {
    // Unsharded: every rank holds the same state, rank 0 writes it by parameter name.
    if (rank != 0) return std::nullopt;
    std::vector<NamedTensor> moments;
    for (const Parameter& p : trained.all()) {
      moments.push_back({"exp_avg." + p.name, optimizer.exp_avg().slice(p.offset, p.shape)});
      moments.push_back({"exp_avg_sq." + p.name, optimizer.exp_avg_sq().slice(p.offset, p.shape)});
    }
    return std::pair{std::string(kOptimizer), write_safetensors((fs::path(dir) / kOptimizer).string(), moments)};
  }
  // ZeRO: each rank writes the moments it owns and which runs of the flat layout
  // they are: [[layout offset, index in the tensors, count], ...].
  Json ranges = Json::array();
  for (const ParameterSet::StoredRange& r : optimizer.moment_ranges()) ranges.push_back({r.offset, r.stored, r.count});
  const std::string name = optimizer_shard_file(rank, world);
  return std::pair{name, write_safetensors((fs::path(dir) / name).string(),
                                           {{"exp_avg", optimizer.exp_avg()}, {"exp_avg_sq", optimizer.exp_avg_sq()}},
                                           {{"ranges", ranges.dump()}})};
}

std::vector<const Parameter*> CheckpointWeights::order(const Transformer& model) {
  // The trainable parameters: everything for full training, only the adapters
  // for LoRA (the base stays where it was loaded from).
  std::vector<const Parameter*> order;
  for (const Parameter& p : model.trainable_params().all()) order.push_back(&p);
  std::stable_sort(order.begin(), order.end(), [](const Parameter* a, const Parameter* b) { return a->unit < b->unit; });
  return order;
}

namespace {

std::vector<SafetensorsWriter::Layout> weights_layout(const std::vector<const Parameter*>& order, DType dtype) {
  std::vector<SafetensorsWriter::Layout> layout;
  for (const Parameter* p : order) layout.push_back({p->name, dtype, p->whole_shape});
  return layout;
}

}  // namespace

CheckpointWeights::CheckpointWeights(const std::string& dir, const Transformer& model)
    : file_(model.lora() ? kAdapter : kWeights),
      order_(order(model)),
      writer_((fs::path(dir) / file_).string(), weights_layout(order_, model.trainable_params().values().dtype()),
              {{"format", "hone"}, {"model", model.config().name}}) {}

void CheckpointWeights::write(const Parameter& p, const Tensor& whole) {
  HONE_ASSERT(next_ < order_.size() && order_[next_] == &p);
  ++next_;
  writer_.write(whole);
}

std::pair<std::string, WrittenFile> CheckpointWeights::commit() { return {file_, writer_.commit()}; }

std::string finish_checkpoint(const std::string& run_dir, const std::string& dir, const Transformer& model,
                              int64_t optimizer_steps, const TrainerState& state, int64_t keep_last_n,
                              const std::map<std::string, WrittenFile>& written,
                              const std::vector<std::string>& companion_files) {
  const std::string name = checkpoint_folder_name(state.step);
  const fs::path final_path = fs::path(run_dir) / name;
  std::map<std::string, WrittenFile> files = written;
  files[kModelJson] = write_json_file((fs::path(dir) / kModelJson).string(), model_config_to_json(model.config()));
  files[kTrainerState] = write_json_file((fs::path(dir) / kTrainerState).string(), {{"step", state.step},
                                                             {"tokens_seen", state.tokens_seen},
                                                             {"samples_seen", state.samples_seen},
                                                             {"nonfinite_steps", state.nonfinite_steps},
                                                             {"train_seconds", state.train_seconds},
                                                             {"next_lr", state.next_lr ? Json(*state.next_lr) : Json()},
                                                             {"cpu_threads", state.cpu_threads ? Json(*state.cpu_threads) : Json()},
                                                             {"optimizer_steps", optimizer_steps},
                                                             {"data", state.data_state},
                                                             {"config", state.config},
                                                             {"base_model", base_model_to_json(state.base_model)}});
  for (const std::string& file : companion_files) {
    const std::string name = companion_name(file);
    files[name] = copy_file(file, (fs::path(dir) / name).string());
  }
  // The manifest (sizes and checksums of every file, whichever rank wrote it)
  // comes last: a folder without one is not a checkpoint.
  Json listed = Json::object();
  for (const auto& [file, w] : files) listed[file] = {{"bytes", w.bytes}, {"xxh3_64", checksum_hex(w.checksum)}};
  write_json_file((fs::path(dir) / "manifest.json").string(),
                  {{"format", kFormat}, {"version", kVersion}, {"step", state.step}, {"files", listed}});
  sync_directory(dir);
  if (fs::exists(final_path)) remove_checkpoint_folder(final_path);  // a step re-saved after a resume
  fs::rename(dir, final_path);
  sync_directory(run_dir);
  {
    AtomicFile latest((fs::path(run_dir) / kLatest).string());
    latest.write(name + "\n");
    latest.commit();
  }
  if (keep_last_n > 0) {
    // The run's own line: the checkpoints of a later step were left by a run
    // resumed from an earlier one, and are neither counted nor removed.
    auto all = checkpoints_in(run_dir);
    std::erase_if(all, [&](const auto& c) { return c.first > state.step; });
    for (size_t i = 0; i + size_t(keep_last_n) < all.size(); ++i) {
      if (all[i].second != final_path) remove_checkpoint_folder(all[i].second);
    }
  }
  return final_path.string();
}

std::string save_checkpoint(const std::string& run_dir, const Transformer& model, const AdamW& optimizer,
                            const TrainerState& state, int64_t keep_last_n,
                            const std::vector<std::string>& companion_files) {
  fs::create_directories(run_dir);
  const TemporaryCheckpointFolder dir(run_dir, state.step);
  std::map<std::string, WrittenFile> files;
  if (auto written = write_optimizer_state(dir.path(), model, optimizer, 0, 1)) files.insert(*written);
  CheckpointWeights weights(dir.path(), model);
  for (const Parameter* p : weights.parameters()) weights.write(*p, p->value);
  files.insert(weights.commit());
  return finish_checkpoint(run_dir, dir.path(), model, optimizer.steps_taken(), state, keep_last_n, files,
                           companion_files);
}

void save_model(const WeightSource& source, const std::string& path, std::optional<DType> dtype) {
  const DType stored = dtype.value_or(source.stored_dtype());
  HONE_CHECK(stored == DType::f32 || stored == DType::bf16 || stored == DType::f16,
             "model folders hold fp32, bf16 or fp16 weights, not {}", dtype_name(stored));
  const ModelConfig& config = source.config();
  const std::vector<ParameterSpec> specs = parameter_specs(config);
  AtomicFolder folder(path, false);
  Manifest manifest;
  // One parameter in memory at a time: the file is written as it is read.
  std::vector<SafetensorsWriter::Layout> layout;
  for (const ParameterSpec& spec : specs) layout.push_back({spec.name, stored, spec.shape});
  SafetensorsWriter weights(folder.file(kWeights), layout, {{"format", "hone"}, {"model", config.name}});
  for (const ParameterSpec& spec : specs) {
    Tensor value = Tensor::empty(spec.shape, DType::f32);
    source.read(spec.name, value);
    weights.write(ops::cast_to(value, stored));
  }
  manifest.add(kWeights, weights.commit());
  manifest.add(kModelJson, write_json_file(folder.file(kModelJson), model_config_to_json(config)));
  for (const std::string& file : source.companion_files()) {
    const std::string name = companion_name(file);
    manifest.add(name, copy_file(file, folder.file(name)));
  }
  manifest.write(folder);
  folder.commit();
}

std::string model_folder_of(const std::string& path) {
  // A run directory, with or without its `latest` file (as resume reads one).
  if (!fs::exists(fs::path(path) / "manifest.json") && fs::is_directory(path)) {
    if (auto folder = find_checkpoint(path, kLatest)) return *folder;
  }
  return path;
}

std::optional<std::string> find_checkpoint(const std::string& run_dir, const std::string& resume) {
  if (resume != kLatest) {
    // A step folder of the run may be named by itself (the run's, before one of
    // that name where hone runs); a run directory means its latest checkpoint.
    const fs::path in_run = fs::path(run_dir) / resume;
    const bool names_the_runs =
        fs::is_directory(in_run) && (resume.find('/') == std::string::npos || !fs::is_directory(resume));
    const std::string folder = names_the_runs ? in_run.string() : resume;
    if (!fs::is_directory(folder)) {
      std::vector<std::string> names = {kLatest};
      if (fs::is_directory(run_dir)) {
        for (const auto& [step, path] : checkpoints_in(run_dir)) names.push_back(path.filename().string());
      }
      // torchtune's resume_from_checkpoint: True.
      const bool a_yes = resume == "True" || resume == "true" || resume == "yes" || resume == "1";
      const std::string suggestion = a_yes ? std::string(kLatest) : closest_match(resume, names);
      fail("resume: '{}' is not a checkpoint folder (nor one of {}){}", resume, run_dir,
           suggestion.empty() ? std::string() : fmt::format(" (did you mean '{}'?)", suggestion));
    }
    if (fs::exists(fs::path(folder) / "manifest.json")) return folder;
    return find_checkpoint(folder, kLatest).value_or(folder);  // else loading names what is missing
  }
  // `latest` lost (deleted, or a copy without it), or naming a step folder
  // deleted since (a bad last save removed by hand): the last complete step folder.
  const auto last_complete = [&]() -> std::optional<std::string> {
    if (!fs::is_directory(run_dir)) return std::nullopt;
    const auto all = checkpoints_in(run_dir);
    for (auto it = all.rbegin(); it != all.rend(); ++it)
      if (fs::exists(it->second / "manifest.json")) return it->second.string();
    return std::nullopt;
  };
  const std::optional<std::string> name = name_in_latest(run_dir);
  if (!name || !fs::exists(fs::path(run_dir) / *name)) return last_complete();
  HONE_CHECK(fs::is_directory(fs::path(run_dir) / *name), "{}: names '{}', which is not a folder",
             (fs::path(run_dir) / kLatest).string(), *name);
  return (fs::path(run_dir) / *name).string();
}

std::optional<std::string> name_in_latest(const std::string& run_dir) {
  const fs::path latest = fs::path(run_dir) / kLatest;
  if (!fs::exists(latest)) return std::nullopt;
  HONE_CHECK(!fs::is_directory(latest), "{}: a folder, where a file naming the newest checkpoint was expected",
             latest.string());
  std::ifstream in(latest);
  std::string name;
  std::getline(in, name);
  HONE_CHECK(!name.empty(), "{}: names no checkpoint (it is empty)", latest.string());
  // hone writes a folder's name there: a path would resume another run's checkpoint.
  // A NUL or an over-long name (a damaged file) would fail later with the system's words.
  if (name.find_first_of(std::string("/\0", 2)) != std::string::npos || name == "." || name == ".." ||
      name.size() > 255) {
    std::string shown = name.substr(0, 255);
    replace_all(shown, std::string(1, '\0'), "\\0");
    fail("{}: names '{}', not a checkpoint folder beside it (hone writes a name such as {})", latest.string(), shown,
         checkpoint_folder_name(1));
  }
  return name;
}

namespace {

// `folder`'s manifest.json: the files of the checkpoint with their sizes and checksums.
Json read_manifest(const std::string& folder, std::string& manifest_path) {
  manifest_path = (fs::path(folder) / "manifest.json").string();
  HONE_CHECK(fs::exists(manifest_path), "{}: not a complete checkpoint (no manifest.json)", folder);
  Json manifest = read_json_file(manifest_path);
  // Compared, not read: a damaged manifest's values may be of any type.
  HONE_CHECK(manifest.is_object() && manifest.contains("format") && manifest["format"] == kFormat &&
                 manifest.contains("version") && manifest["version"] == kVersion && manifest.contains("files") &&
                 manifest["files"].is_object(),
             "{}: not a hone checkpoint manifest (format {} version {})", manifest_path, kFormat, kVersion);
  // Each file's entry is read again below (and its checksum by base_model_record): checked once, here.
  for (const auto& [file, info] : manifest["files"].items()) {
    const JsonFields fields(info, fmt::format("{}: files: {}", manifest_path, file));
    fields.count("bytes");
    fields.string("xxh3_64");
  }
  return manifest;
}

void verify_listed_file(const std::string& folder, const std::string& file, const Json& info,
                        const std::string& manifest_path) {
  const std::string path = (fs::path(folder) / file).string();
  HONE_CHECK(fs::exists(path), "{}: missing (listed in {})", path, manifest_path);
  HONE_CHECK(fs::is_regular_file(path), "{}: not a file (listed in {} as one)", path, manifest_path);
  const uint64_t size = fs::file_size(path), listed_size = info["bytes"].get<uint64_t>();
  HONE_CHECK(size == listed_size, "{}: {} bytes where the manifest lists {}: {} since it was saved", path, size,
             listed_size, size < listed_size ? "cut short or changed" : "changed");
  const std::string checksum = checksum_hex(file_checksum(path)), listed_checksum = info["xxh3_64"].get<std::string>();
  HONE_CHECK(checksum == listed_checksum, "{}: checksum {} does not match the manifest's {}", path, checksum,
             listed_checksum);
}

}  // namespace

void verify_checkpoint(const std::string& folder) {
  std::string manifest_path;
  const Json manifest = read_manifest(folder, manifest_path);
  for (const auto& [file, info] : manifest["files"].items()) verify_listed_file(folder, file, info, manifest_path);
}

namespace {

// A parameter's tensor in `file` into its master weights, whose shape and dtype it must have.
void load_parameter(const SafetensorsFile& file, ParameterSet& set, const Parameter& p) {
  const SafetensorsFile::Entry& e = file.entry(p.name);
  const DType master = set.values().dtype();
  HONE_CHECK(e.shape == p.whole_shape && e.dtype == master, "{}: '{}' is {} {}, the model needs {} {}", file.path(),
             p.name, dtype_name(e.dtype), e.shape.str(), dtype_name(master), p.whole_shape.str());
  set.write(p, file.load(p.name));
}

}  // namespace

void check_adapters_base(const std::string& folder, const ModelConfig& base) {
  const ModelConfig trained_on = read_model_config(folder);
  // A model's name only labels it: an HF export of the base, or its folder copied, is named by its folder.
  const auto shape = [](const ModelConfig& c) {
    Json j = model_config_to_json(c);
    j.erase("name");
    return j;
  };
  HONE_CHECK(shape(trained_on) == shape(base),
             "{}: adapters trained on another base model ({}: {} layers, dim {}, vocabulary {}) than this one ({}: {} "
             "layers, dim {}, vocabulary {})",
             folder, trained_on.name, trained_on.n_layers, trained_on.dim, trained_on.vocab_size, base.name,
             base.n_layers, base.dim, base.vocab_size);
}

void load_adapters(const std::string& folder, Transformer& model) {
  HONE_CHECK(model.lora(), "{}: LoRA adapters, but the model was built without LoRA", folder);
  verify_checkpoint(folder);
  check_adapters_base(folder, model.config());
  const SafetensorsFile file(adapter_file(folder));
  const auto names = file.names();
  HONE_CHECK(names.size() == model.trainable_params().all().size(),
             "{}: holds {} adapter tensors, the model's LoRA settings make {} (another rank or other modules?)",
             file.path(), names.size(), model.trainable_params().all().size());
  for (const Parameter& p : model.trainable_params().all()) load_parameter(file, model.trainable_params(), p);
  model.trainable_params().sync_compute();
}

namespace {

// The optimizer's moments from whichever layout the checkpoint has: by parameter
// (unsharded runs) or runs of the flat layout (ZeRO shards of any world size and stage).
void load_moments(const std::string& folder, const Transformer& model, AdamW& optimizer) {
  const std::vector<ParameterSet::StoredRange> held = optimizer.moment_ranges();
  if (fs::exists(fs::path(folder) / kOptimizer)) {
    const SafetensorsFile file((fs::path(folder) / kOptimizer).string());
    std::set<std::string> names;
    for (const Parameter& p : model.trainable_params().all()) names.insert({"exp_avg." + p.name, "exp_avg_sq." + p.name});
    check_no_other_tensors(file, names, "the optimizer of the model's trainable parameters");
    for (const Parameter& p : model.trainable_params().all()) {
      for (const char* moment : {"exp_avg", "exp_avg_sq"}) {
        const Tensor stored = file.load(std::string(moment) + "." + p.name);
        HONE_CHECK(stored.shape() == p.whole_shape && stored.dtype() == optimizer.exp_avg().dtype(),
                   "{}: '{}.{}' is {} {}, the model needs {} {}", file.path(), moment, p.name,
                   dtype_name(stored.dtype()), stored.shape().str(), dtype_name(optimizer.exp_avg().dtype()),
                   p.whole_shape.str());
        copy_held(stored, p.whole_offset, std::string(moment) == "exp_avg" ? optimizer.exp_avg() : optimizer.exp_avg_sq(),
                     held);
      }
    }
    return;
  }
  // The whole model's layout, which the ranges speak (a tensor-parallel rank holds parts of it).
  int64_t total = 0;
  for (const Parameter& p : model.trainable_params().all()) total = std::max(total, p.whole_offset + p.whole_shape.numel());
  // Runs of parameters the shards hold: tensor-parallel ranks (and data-parallel
  // replicas below ZeRO's stages) each hold the unsplit ones, so runs may repeat.
  std::vector<std::pair<int64_t, int64_t>> held_runs;  // offset, count
  for (const auto& entry : fs::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("optimizer-") || !name.ends_with(".safetensors")) continue;
    const SafetensorsFile file(entry.path().string());
    const auto ranges = file.metadata().find("ranges");
    HONE_CHECK(ranges != file.metadata().end(), "{}: no 'ranges' in its metadata (a shard from an older hone?)",
               file.path());
    const Tensor m = file.load("exp_avg"), v = file.load("exp_avg_sq");
    const Json list = Json::parse(ranges->second, nullptr, /*allow_exceptions=*/false);
    HONE_CHECK(list.is_array(), "{}: its metadata 'ranges' is not a JSON list", file.path());
    for (const Json& r : list) {
      const bool triple = r.is_array() && r.size() == 3 && r[0].is_number_integer() && r[1].is_number_integer() &&
                          r[2].is_number_integer();
      HONE_CHECK(triple, "{}: metadata 'ranges' holds {}, not [offset, index, count]", file.path(), r.dump());
      const int64_t offset = r[0].get<int64_t>(), at = r[1].get<int64_t>(), count = r[2].get<int64_t>();
      // Compared as differences: a hand-edited sum could overflow.
      HONE_CHECK(at >= 0 && count >= 0 && at <= m.numel() && count <= m.numel() - at && m.numel() == v.numel(),
                 "{}: metadata 'ranges' holds {}: {} moments from index {} lie outside its {}", file.path(), r.dump(),
                 count, at, m.numel());
      HONE_CHECK(offset >= 0 && offset <= total && count <= total - offset,
                 "{}: metadata 'ranges' holds {}: parameters {} to {} lie outside the model's {}", file.path(),
                 r.dump(), offset, offset + count, total);
      held_runs.emplace_back(offset, count);
      copy_held(m.slice(at, {count}), offset, optimizer.exp_avg(), held);
      copy_held(v.slice(at, {count}), offset, optimizer.exp_avg_sq(), held);
    }
  }
  // Every parameter held by some shard (a sum of the counts would count the repeats).
  std::sort(held_runs.begin(), held_runs.end());
  int64_t covered = 0;  // parameters [0, covered) are held
  for (const auto& [offset, count] : held_runs) {
    HONE_CHECK(offset <= covered, "{}: no optimizer shard holds the moments of parameters {} to {} (a shard file is "
               "missing)", folder, covered, offset);
    covered = std::max(covered, offset + count);
  }
  HONE_CHECK(covered == total, "{}: no optimizer shard holds the moments of parameters {} to {} (a shard file is "
             "missing)", folder, covered, total);
}

}  // namespace

namespace {

// The training state, checked against the manifest first (a resume reads it
// before the weights, which are checked as they load).
Json read_trainer_state(const std::string& folder) {
  HONE_CHECK(fs::exists(fs::path(folder) / kTrainerState),
             "{}: a model folder without training state ({}): a run can start from it (fine-tuning) but not resume it",
             folder, kTrainerState);
  std::string manifest_path;
  const Json manifest = read_manifest(folder, manifest_path);
  const auto listed = manifest["files"].find(kTrainerState);
  HONE_CHECK(listed != manifest["files"].end(), "{}: {} is not listed in it", manifest_path, kTrainerState);
  verify_listed_file(folder, kTrainerState, *listed, manifest_path);
  const std::string path = (fs::path(folder) / kTrainerState).string();
  Json state = read_json_file(path);
  HONE_CHECK(state.is_object(), "{}: not a JSON object: not a hone run's training state", path);
  return state;
}

}  // namespace

BaseModelRecord base_model_record(const std::string& checkpoint_path) {
  BaseModelRecord record{.folder = model_folder_of(checkpoint_path), .weights_xxh3 = std::nullopt};
  record.absolute_folder = fs::absolute(record.folder).lexically_normal().string();
  if (!fs::exists(fs::path(record.folder) / "manifest.json")) return record;
  std::string manifest_path;
  const Json manifest = read_manifest(record.folder, manifest_path);
  for (const char* weights : {kWeights, kAdapter}) {
    const auto listed = manifest["files"].find(weights);
    if (listed != manifest["files"].end()) {
      record.weights_xxh3 = listed->at("xxh3_64").get<std::string>();
      break;
    }
  }
  return record;
}

bool same_base_model(const BaseModelRecord& a, const BaseModelRecord& b) {
  if (a.weights_xxh3 && b.weights_xxh3) return *a.weights_xxh3 == *b.weights_xxh3;
  std::error_code ec_a, ec_b;
  const fs::path path_a = fs::weakly_canonical(a.folder, ec_a), path_b = fs::weakly_canonical(b.folder, ec_b);
  return ec_a || ec_b ? a.folder == b.folder : path_a == path_b;
}

std::string describe(const BaseModelRecord& base) {
  return base.weights_xxh3 ? fmt::format("{} (weights xxh3 {})", base.folder, *base.weights_xxh3) : base.folder;
}

namespace {

std::optional<BaseModelRecord> base_model_from_json(const Json& state, const std::string& folder) {
  const Json base = state.value("base_model", Json());
  if (base.is_null()) return std::nullopt;
  const Json xxh3 = base.is_object() ? base.value("weights_xxh3", Json()) : Json();
  HONE_CHECK(base.is_object() && base.contains("folder") && base["folder"].is_string() &&
                 (xxh3.is_null() || xxh3.is_string()),
             "{}/{}: base_model is {}, not {{\"folder\": PATH, \"weights_xxh3\": CHECKSUM or null}}", folder,
             kTrainerState, base.dump());
  // A relative folder not found from here: where it was from the run's working directory.
  std::string base_folder = base["folder"].get<std::string>();
  const Json absolute = base.value("absolute_folder", Json());
  const std::string absolute_folder = absolute.is_string() ? absolute.get<std::string>() : "";
  if (fs::path(base_folder).is_relative() && !fs::exists(base_folder) && !absolute_folder.empty() &&
      fs::exists(absolute_folder)) {
    base_folder = absolute_folder;
  }
  return BaseModelRecord{.folder = base_folder,
                         .weights_xxh3 = xxh3.is_null() ? std::nullopt : std::optional(xxh3.get<std::string>()),
                         .absolute_folder = absolute_folder};
}

}  // namespace

std::optional<BaseModelRecord> checkpoint_base_model(const std::string& folder) {
  return base_model_from_json(read_trainer_state(folder), folder);
}

Json checkpoint_config(const std::string& folder) {
  const Json state = read_trainer_state(folder);
  HONE_CHECK(state.is_object() && state.contains("config"), "{}/{}: no \"config\": not a hone run's training state",
             folder, kTrainerState);
  return state["config"];
}

TrainerState load_checkpoint(const std::string& folder, Transformer& model, AdamW& optimizer) {
  const Json j = read_trainer_state(folder);
  if (model.lora()) {
    HONE_CHECK(fs::exists(fs::path(folder) / kAdapter), "{}: no {}: not the checkpoint of a LoRA run", folder,
               kAdapter);
    load_adapters(folder, model);
  } else {
    HONE_CHECK(!fs::exists(fs::path(folder) / kAdapter),
               "{}: the checkpoint of a LoRA run; resume it with the same LoRA settings", folder);
    load_weights(ModelFolder(folder, &model.config()), model);
  }
  load_moments(folder, model, optimizer);

  // A training state edited by hand is named with the key at fault, not trained from.
  const JsonFields fields(j, fmt::format("{}/{}", folder, kTrainerState));
  TrainerState state;
  state.step = fields.count("step");
  state.tokens_seen = fields.count("tokens_seen");
  state.samples_seen = fields.count("samples_seen");
  state.nonfinite_steps = fields.count("nonfinite_steps", 0);
  state.train_seconds = fields.number("train_seconds", 0.0);  // 0 in checkpoints from before it was kept
  if (fields.has("next_lr")) state.next_lr = fields.number("next_lr");
  if (fields.has("cpu_threads")) state.cpu_threads = fields.count("cpu_threads");
  state.data_state = fields.object("data").json();
  state.config = fields.object("config").json();
  state.base_model = base_model_from_json(j, folder);
  optimizer.set_steps_taken(fields.count("optimizer_steps"));
  return state;
}

ModelConfig read_model_config(const std::string& folder) {
  const fs::path path = fs::path(folder) / kModelJson;
  HONE_CHECK(fs::exists(path), "{}: no {} (not a hone model folder, or a checkpoint from an older hone)", folder,
             kModelJson);
  return model_config_from_json(read_json_file(path.string()), path.string());
}

std::string adapter_file(const std::string& folder) { return (fs::path(folder) / kAdapter).string(); }

bool is_lora_checkpoint(const std::string& folder) {
  return fs::exists(fs::path(folder) / kAdapter) && !fs::exists(fs::path(folder) / kWeights);
}

TrainedLora read_trained_lora(const std::string& folder) {
  const std::string path = (fs::path(folder) / kTrainerState).string();
  HONE_CHECK(fs::exists(path), "{}: no {}: not the checkpoint of a lora_finetune run", folder, kTrainerState);
  const Json state = read_json_file(path);
  // The run's resolved config: every key is there (with its default where it was not given).
  const Json* config = state.contains("config") ? &state["config"] : nullptr;
  const auto at = [&](std::initializer_list<const char*> keys) -> const Json& {
    const Json* node = config;
    std::string key = "config";
    for (const char* k : keys) {
      key += std::string(".") + k;
      HONE_CHECK(node && node->is_object() && node->contains(k), "{}: no {}: not the checkpoint of a lora_finetune run",
                 path, key);
      node = &(*node)[k];
    }
    return *node;
  };
  TrainedLora t;
  try {
    t.lora = {.rank = at({"model", "lora_rank"}).get<int64_t>(),
              .alpha = at({"model", "lora_alpha"}).get<double>(),
              .dropout = at({"model", "lora_dropout"}).get<double>(),
              .attn_modules = at({"model", "lora_attn_modules"}).get<std::vector<std::string>>(),
              .apply_to_mlp = at({"model", "apply_lora_to_mlp"}).get<bool>(),
              .apply_to_output = at({"model", "apply_lora_to_output"}).get<bool>()};
    // Written since DoRA came; runs before it were plain LoRA.
    const Json& model = at({"model"});
    t.lora.use_dora = model.contains("use_dora") && model["use_dora"].get<bool>();
    t.base_model = base_model_from_json(state, folder);
    t.base = t.base_model ? t.base_model->folder : at({"checkpoint", "path"}).get<std::string>();
    t.base_format = at({"checkpoint", "format"}).get<std::string>();
    const Json* tokenizer = config->contains("tokenizer") ? &(*config)["tokenizer"] : nullptr;
    if (tokenizer && tokenizer->contains("path") && (*tokenizer)["path"].is_string())
      t.tokenizer = (*tokenizer)["path"].get<std::string>();
  } catch (const Json::exception& e) {
    fail("{}: the run's LoRA settings are not what lora_finetune writes: {}", path, e.what());
  }
  return t;
}

namespace {

class LoraMergedWeights final : public WeightSource {
 public:
  // `owned`: the base, when the source keeps it.
  LoraMergedWeights(const WeightSource& base, LoraConfig lora, AdapterReader adapters, std::string folder,
                    std::string what, std::unique_ptr<WeightSource> owned = nullptr,
                    std::vector<std::string> notes = {})
      : base_(base), owned_(std::move(owned)), lora_(std::move(lora)), targets_(lora_targets(base.config(), lora_)),
        adapters_(std::move(adapters)), folder_(fs::weakly_canonical(folder).string()), what_(std::move(what)),
        notes_(std::move(notes)) {}
  const ModelConfig& config() const override { return base_.config(); }
  DType stored_dtype() const override { return base_.stored_dtype(); }
  // The base's, and those of the adapters' folder in their place: a LoRA run's
  // checkpoint holds its tokenizer and the chat template it trained.
  std::vector<std::string> companion_files() const override {
    std::vector<std::string> files = base_.companion_files();
    for (const std::string& own : companion_files_in(folder_)) {
      const auto same_name = [&](const std::string& f) { return companion_name(f) == companion_name(own); };
      if (auto it = std::ranges::find_if(files, same_name); it != files.end()) *it = own;
      else files.push_back(own);
    }
    return files;
  }
  std::string description() const override { return fmt::format("{} with {} merged", base_.description(), what_); }
  std::vector<std::string> notes() const override {
    std::vector<std::string> notes = base_.notes();
    notes.insert(notes.end(), notes_.begin(), notes_.end());
    return notes;
  }
  std::vector<std::string> merged_adapters() const override {
    std::vector<std::string> folders = base_.merged_adapters();
    folders.push_back(folder_);
    return folders;
  }
  void read(const std::string& name, const Tensor& dst) const override {
    base_.read(name, dst);
    // Shapes checked whole: a transposed adapter has the right number of elements.
    const auto adapter = [&](const std::string& adapter_name, const Shape& shape) {
      const Tensor t = adapters_(adapter_name);
      HONE_CHECK(t.shape() == shape, "{}: '{}' is {}, where LoRA of rank {} on {} needs {}", what_, adapter_name,
                 t.shape().str(), lora_.rank, name, shape.str());
      return t;
    };
    for (const LoraTarget& t : targets_) {
      if (t.base != name) continue;
      merge_adapter(dst, t.row_begin, t.rows, adapter(t.a_name(), Shape{lora_.rank, t.in}),
                    adapter(t.b_name(), Shape{t.rows, lora_.rank}), lora_.scale(),
                    lora_.use_dora ? adapter(t.magnitude_name(), Shape{t.rows}) : Tensor());
    }
  }

 private:
  const WeightSource& base_;
  std::unique_ptr<WeightSource> owned_;
  LoraConfig lora_;
  std::vector<LoraTarget> targets_;
  AdapterReader adapters_;
  std::string folder_, what_;
  std::vector<std::string> notes_;
};

}  // namespace

AdapterReader checkpoint_adapters(const std::string& folder) {
  verify_checkpoint(folder);
  auto file = std::make_shared<SafetensorsFile>(adapter_file(folder));
  return [file](const std::string& name) { return ops::cast_to(file->load(name), DType::f32); };
}

void load_adapters(const AdapterReader& adapters, Transformer& model) {
  HONE_CHECK(model.lora(), "LoRA adapters, but the model was built without LoRA");
  ParameterSet& params = model.trainable_params();
  for (const Parameter& p : params.all()) params.write(p, adapters(p.name));
  params.sync_compute();
}

std::unique_ptr<WeightSource> open_trained_model(const std::string& folder, const WeightSource& base,
                                                 const std::optional<LoraConfig>& lora) {
  if (!lora) return open_model_folder(folder);
  return std::make_unique<LoraMergedWeights>(base, *lora, checkpoint_adapters(folder), folder,
                                             "the LoRA adapters of " + folder);
}

std::unique_ptr<WeightSource> merge_adapters(std::unique_ptr<WeightSource> base, const LoraConfig& lora,
                                             AdapterReader adapters, const std::string& folder, std::string what,
                                             std::vector<std::string> notes) {
  const WeightSource& kept = *base;
  return std::make_unique<LoraMergedWeights>(kept, lora, std::move(adapters), folder, std::move(what),
                                             std::move(base), std::move(notes));
}

std::unique_ptr<WeightSource> open_model_folder(const std::string& folder) {
  return std::make_unique<ModelFolder>(folder, nullptr);
}

void load_model_weights(const std::string& folder, Transformer& model) {
  load_weights(ModelFolder(folder, &model.config()), model);
}

}  // namespace hone
