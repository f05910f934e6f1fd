#include "hone/train/training_world.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <filesystem>
#include <map>
#include <span>

#include "hone/core/error.hpp"
#include "hone/dist/communicator.hpp"
#include "hone/dist/environment.hpp"
#include "hone/dist/fully_sharded.hpp"
#include "hone/dist/tensor_parallel.hpp"
#include "hone/ops/ops.hpp"

namespace hone {

namespace {

// The model's parameter sets: with LoRA the frozen base, then the adapters.
std::vector<ParameterSet*> parameter_sets(Transformer& model) {
  std::vector<ParameterSet*> sets{&model.params()};
  if (model.lora()) sets.push_back(&model.trainable_params());
  return sets;
}

// The keys whose values differ between two config trees, "key value where rank 0 has value".
std::vector<std::string> differing_keys(const Json& mine, const Json& reference) {
  std::map<std::string, const Json*> theirs;
  for (const auto& [key, value] : config_leaves(reference)) theirs[key] = value;
  std::vector<std::string> out;
  for (const auto& [key, value] : config_leaves(mine)) {
    const auto it = theirs.find(key);
    if (it == theirs.end()) {
      out.push_back(fmt::format("{} {} where rank 0 has none", key, value->dump()));
      continue;
    }
    if (*it->second != *value) {
      out.push_back(fmt::format("{} {} where rank 0 has {}", key, value->dump(), it->second->dump()));
    }
    theirs.erase(it);  // what is left, rank 0 has alone
  }
  for (const auto& [key, value] : theirs) {
    out.push_back(fmt::format("{} unset where rank 0 has {}", key, value->dump()));
  }
  return out;
}

// Every rank must run the same resolved config: one given another (an override
// for one rank, a file edited between the starts) would train its replica apart
// from the others, or stall or break a collective later. Rank 0's is the
// reference; every rank fails together, those that differ naming how.
void check_same_config(dist::Communicator& world, const Config& c, Device device) {
  if (world.size() == 1) return;
  // Rank 0's text, its length first (a broadcast moves any dtype bit for bit).
  const std::string text = c.to_yaml();
  const Tensor length = Tensor::from(std::vector<int64_t>{int64_t(text.size())}, {1}).to(device);
  world.broadcast(length, 0);
  std::vector<uint8_t> bytes(size_t(length.to_vector<int64_t>()[0]));
  if (world.rank() == 0) std::ranges::copy(text, bytes.begin());
  const Tensor reference = Tensor::from(bytes, {int64_t(bytes.size())}).to(device);
  world.broadcast(reference, 0);
  const std::vector<uint8_t> received = reference.to_vector<uint8_t>();
  const std::string reference_text(received.begin(), received.end());
  const bool differs = reference_text != text;
  const auto differing = int64_t(dist::sum_over(world, differs ? 1.0 : 0.0, device));
  if (differing == 0) return;
  HONE_CHECK(differs, "{} of the {} ranks {} given a config other than rank 0's: every rank must run the same "
             "config (their errors name the keys)", differing, world.size(), differing == 1 ? "was" : "were");
  const std::vector<std::string> keys =
      differing_keys(c.tree(), Config::from_yaml(reference_text, "rank 0's config").tree());
  fail("rank {} was given a config other than rank 0's: {}; every rank must run the same config", world.rank(),
       keys.empty() ? std::string("the same keys, written otherwise") : fmt::format("{}", fmt::join(keys, ", ")));
}

}  // namespace

TrainingWorld::TrainingWorld(const Config& c, Device device)
    : device_(device), zero_stage_(int(c.get<int64_t>("distributed.zero"))) {
  const int64_t tp = c.get<int64_t>("distributed.tp");
  const dist::ProcessInfo process = dist::discover_process();
  device_ = dist::rank_device(process, device_);
  ops::use_device(device_);
  world_ = dist::Communicator::from_environment(device_);
  check_same_config(*world_, c, device_);
  HONE_CHECK(tp >= 1 && world_->size() % tp == 0,
             "{}: distributed.tp {} must divide the {} ranks of this run (dp x tp = world size)",
             c.origin_of("distributed.tp"), tp, world_->size());
  mesh_ = std::make_unique<dist::DeviceMesh>(*world_, world_->size() / int(tp), int(tp));
  const double bucket_mb = c.get<double>("distributed.bucket_mb");
  data_parallel_ = std::make_unique<dist::DataParallel>(mesh_->dp(), zero_stage_, device_,
                                                        int64_t(bucket_mb * 1024 * 1024), &mesh_->tp());
}

TrainingWorld::~TrainingWorld() = default;

void TrainingWorld::check_same_data(const std::string& what, int64_t value) const {
  if (size() == 1) return;
  const Tensor reference = Tensor::from(std::vector<int64_t>{value}, {1}).to(device_);
  world_->broadcast(reference, 0);
  const int64_t rank0 = reference.to_vector<int64_t>()[0];
  const auto differing = int64_t(dist::sum_over(*world_, value != rank0 ? 1.0 : 0.0, device_));
  if (differing == 0) return;
  HONE_CHECK(value == rank0, "rank {} has {} {} where rank 0 has {}: every rank must read the same data (a relative "
             "path read in another working directory, or node-local copies that differ?)", rank(), value, what, rank0);
  fail("{} of the {} ranks {} other data than rank 0's (their errors say how): every rank must read the same data",
       differing, size(), differing == 1 ? "reads" : "read");
}

ModelPlacement TrainingWorld::model_placement() const {
  return {.pad_multiple = zero_stage_ == 1 || zero_stage_ == 2 ? dp_size() : 1,
          .shard = zero_stage_ == 3 && dp_size() > 1 ? ShardSpec{.rank = dp_rank(), .world = dp_size()} : ShardSpec{},
          .tensor_parallel = tp_size() > 1 ? &mesh_->tp() : nullptr};
}

void TrainingWorld::adopt(Transformer& model) {
  if (zero_stage_ == 2) model.set_residency(data_parallel_->shard_gradients(model.trainable_params()));
  if (zero_stage_ != 3) return;
  model.set_residency(data_parallel_->shard_parameters(parameter_sets(model)));
}

void TrainingWorld::for_each_whole_parameter(const Transformer& model,
                                             const std::function<void(const Parameter&, const Tensor&)>& write) const {
  dist::FullyShardedParameters* sharded = data_parallel_->fully_sharded();
  // Rank 0's tp group puts each parameter together (the other replicas hold the same).
  const bool writers = dp_rank() == 0;
  const std::vector<const Parameter*> order = CheckpointWeights::order(model);
  for (size_t i = 0; i < order.size();) {
    const int unit = order[i]->unit;
    if (sharded) sharded->gather_master(model.trainable_params(), unit, /*keep=*/writers);
    for (; i < order.size() && order[i]->unit == unit; ++i) {
      if (!writers) continue;
      const Parameter& p = *order[i];
      const Tensor whole = p.split.dim >= 0 ? dist::gather_whole(p, p.value, mesh_->tp()) : p.value;
      if (is_main()) write(p, whole);
    }
    if (sharded) sharded->release_all();
  }
}

std::string TrainingWorld::save_checkpoint(const std::string& run_dir, const Transformer& model,
                                           const AdamW& optimizer, const TrainerState& state,
                                           int64_t keep_last_n,
                                           const std::vector<std::string>& companion_files) const {
  if (size() == 1) return hone::save_checkpoint(run_dir, model, optimizer, state, keep_last_n, companion_files);
  std::optional<TemporaryCheckpointFolder> made;
  if (is_main()) made.emplace(run_dir, state.step);
  world_->barrier();
  const std::string dir = checkpoint_temp_folder(run_dir, state.step);
  // Without ZeRO the data-parallel replicas hold the same moments: the first writes them.
  const bool replica = zero_stage_ == 0 && dp_rank() > 0;
  const auto written = replica ? std::nullopt : write_optimizer_state(dir, model, optimizer, rank(), size());
  std::optional<CheckpointWeights> weights;
  if (is_main()) weights.emplace(dir, model);
  for_each_whole_parameter(model, [&](const Parameter& p, const Tensor& whole) { weights->write(p, whole); });
  // Rank 0 lists every rank's file in the manifest: each sends its size and
  // checksum (size -1: this rank wrote none).
  const int64_t mine[2] = {written ? int64_t(written->second.bytes) : -1,
                           written ? std::bit_cast<int64_t>(written->second.checksum) : 0};
  const Tensor local = Tensor::from(std::span<const int64_t>(mine), {2}).to(device_);
  const Tensor all = Tensor::empty({2 * size()}, DType::i64, device_);
  world_->all_gather(local, all);
  std::string folder = (std::filesystem::path(run_dir) / checkpoint_folder_name(state.step)).string();
  if (is_main()) {
    const std::vector<int64_t> files = all.to_vector<int64_t>();
    std::map<std::string, WrittenFile> written_files{weights->commit()};
    if (written) written_files.insert(*written);
    for (int r = 1; r < size(); ++r) {
      if (files[2 * r] < 0) continue;
      written_files[optimizer_shard_file(r, size())] = {uint64_t(files[2 * r]),
                                                        std::bit_cast<uint64_t>(files[2 * r + 1])};
    }
    folder = finish_checkpoint(run_dir, dir, model, optimizer.steps_taken(), state, keep_last_n, written_files,
                               companion_files);
  }
  world_->barrier();
  return folder;
}

}  // namespace hone
