#include "hone/io/checkpoint.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "hone/io/atomic_file.hpp"
#include "hone/io/safetensors.hpp"

namespace hone {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "hone-checkpoint";
constexpr int kVersion = 1;
constexpr const char* kLatest = "latest";

Json read_json(const std::string& path) {
  std::ifstream in(path);
  HONE_CHECK(in.good(), "{}: cannot read", path);
  Json j = Json::parse(in, nullptr, false);
  HONE_CHECK(!j.is_discarded(), "{}: not valid JSON", path);
  return j;
}

WrittenFile write_json(const std::string& path, const Json& j) {
  AtomicFile out(path);
  out.write(j.dump(2) + "\n");
  return out.commit();
}

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

}  // namespace

std::string checkpoint_folder_name(int64_t step) { return fmt::format("step_{:07d}", step); }

std::string save_checkpoint(const std::string& run_dir, const Transformer& model, const AdamW& optimizer,
                            const TrainerState& state, int64_t keep_last_n) {
  fs::create_directories(run_dir);
  const std::string name = checkpoint_folder_name(state.step);
  const fs::path final_path = fs::path(run_dir) / name;
  const fs::path temp_path = fs::path(run_dir) / fmt::format(".{}.tmp.{}", name, ::getpid());
  fs::remove_all(temp_path);
  fs::create_directories(temp_path);

  std::vector<NamedTensor> weights, moments;
  for (const Parameter& p : model.params().all()) {
    weights.push_back({p.name, p.value});
    moments.push_back({"exp_avg." + p.name, optimizer.exp_avg().slice(p.offset, p.shape)});
    moments.push_back({"exp_avg_sq." + p.name, optimizer.exp_avg_sq().slice(p.offset, p.shape)});
  }
  Json trainer_state = {{"step", state.step},
                        {"tokens_seen", state.tokens_seen},
                        {"samples_seen", state.samples_seen},
                        {"nonfinite_steps", state.nonfinite_steps},
                        {"optimizer_steps", optimizer.steps_taken()},
                        {"data", state.data_state},
                        {"config", state.config}};
  Json files = Json::object();
  auto record = [&](const std::string& file, const WrittenFile& w) {
    files[file] = {{"bytes", w.bytes}, {"xxh3_64", checksum_hex(w.checksum)}};
  };
  record("model.safetensors", write_safetensors((temp_path / "model.safetensors").string(), weights,
                                                {{"format", "hone"}, {"model", model.config().name}}));
  record("optimizer.safetensors", write_safetensors((temp_path / "optimizer.safetensors").string(), moments));
  record("trainer_state.json", write_json((temp_path / "trainer_state.json").string(), trainer_state));
  // The manifest comes last: a folder without one is not a checkpoint.
  write_json((temp_path / "manifest.json").string(),
             {{"format", kFormat}, {"version", kVersion}, {"step", state.step}, {"files", files}});
  sync_directory(temp_path.string());

  if (fs::exists(final_path)) fs::remove_all(final_path);  // re-saving a step after a resume
  fs::rename(temp_path, final_path);
  sync_directory(run_dir);
  {
    AtomicFile latest((fs::path(run_dir) / kLatest).string());
    latest.write(name + "\n");
    latest.commit();
  }

  if (keep_last_n > 0) {
    auto all = checkpoints_in(run_dir);
    for (size_t i = 0; i + size_t(keep_last_n) < all.size(); ++i) {
      if (all[i].second != final_path) fs::remove_all(all[i].second);
    }
  }
  return final_path.string();
}

std::optional<std::string> find_checkpoint(const std::string& run_dir, const std::string& resume) {
  if (resume != kLatest) {
    HONE_CHECK(fs::is_directory(resume), "resume: '{}' is not a checkpoint folder", resume);
    return resume;
  }
  const fs::path latest = fs::path(run_dir) / kLatest;
  if (!fs::exists(latest)) return std::nullopt;
  std::ifstream in(latest);
  std::string name;
  std::getline(in, name);
  HONE_CHECK(!name.empty() && fs::is_directory(fs::path(run_dir) / name), "{}: names '{}', which is not a folder",
             latest.string(), name);
  return (fs::path(run_dir) / name).string();
}

void verify_checkpoint(const std::string& folder) {
  const std::string manifest_path = (fs::path(folder) / "manifest.json").string();
  HONE_CHECK(fs::exists(manifest_path), "{}: not a complete checkpoint (no manifest.json)", folder);
  const Json manifest = read_json(manifest_path);
  HONE_CHECK(manifest.value("format", "") == kFormat && manifest.value("version", 0) == kVersion &&
                 manifest.contains("files") && manifest["files"].is_object(),
             "{}: not a hone checkpoint manifest (format {} version {})", manifest_path, kFormat, kVersion);
  for (auto& [file, info] : manifest["files"].items()) {
    const std::string path = (fs::path(folder) / file).string();
    HONE_CHECK(fs::exists(path), "{}: missing (listed in {})", path, manifest_path);
    const uint64_t size = fs::file_size(path);
    HONE_CHECK(size == info["bytes"].get<uint64_t>(), "{}: {} bytes, the manifest says {} (truncated?)", path, size,
               info["bytes"].get<uint64_t>());
    const std::string checksum = checksum_hex(file_checksum(path));
    HONE_CHECK(checksum == info["xxh3_64"].get<std::string>(), "{}: checksum {} does not match the manifest's {}",
               path, checksum, info["xxh3_64"].get<std::string>());
  }
}

TrainerState load_checkpoint(const std::string& folder, Transformer& model, AdamW& optimizer) {
  verify_checkpoint(folder);
  SafetensorsFile weights((fs::path(folder) / "model.safetensors").string());
  SafetensorsFile moments((fs::path(folder) / "optimizer.safetensors").string());
  auto load_into = [](const SafetensorsFile& file, const std::string& name, const Tensor& dst) {
    const SafetensorsFile::Entry& e = file.entry(name);
    HONE_CHECK(e.shape == dst.shape() && e.dtype == dst.dtype(), "{}: '{}' is {} {}, the model needs {} {}",
               file.path(), name, dtype_name(e.dtype), e.shape.str(), dtype_name(dst.dtype()), dst.shape().str());
    dst.copy_from(file.load(name));
  };
  for (const Parameter& p : model.params().all()) {
    load_into(weights, p.name, p.value);
    load_into(moments, "exp_avg." + p.name, optimizer.exp_avg().slice(p.offset, p.shape));
    load_into(moments, "exp_avg_sq." + p.name, optimizer.exp_avg_sq().slice(p.offset, p.shape));
  }
  HONE_CHECK(weights.names().size() == model.params().all().size(),
             "{}: holds {} tensors, the model has {} parameters (another architecture?)", weights.path(),
             weights.names().size(), model.params().all().size());
  model.params().sync_compute();

  const Json j = read_json((fs::path(folder) / "trainer_state.json").string());
  TrainerState state;
  state.step = j.at("step").get<int64_t>();
  state.tokens_seen = j.at("tokens_seen").get<int64_t>();
  state.samples_seen = j.at("samples_seen").get<int64_t>();
  state.nonfinite_steps = j.value("nonfinite_steps", int64_t(0));
  state.data_state = j.at("data");
  state.config = j.at("config");
  optimizer.set_steps_taken(j.at("optimizer_steps").get<int64_t>());
  return state;
}

}  // namespace hone
