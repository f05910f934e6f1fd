#pragma once
// The processes of one training run: the world its launcher started (`hone
// launch`, torchrun, mpirun, srun; one process without a launcher), arranged as
// a DeviceMesh dp x tp: each tp group splits one model replica (tensor and
// sequence parallelism, ModelPlacement), and data parallelism at the configured
// ZeRO stage runs over the dp groups. Each replica trains on its own slice of
// every global batch (all ranks of a tp group read the same one).
// Rank 0 alone writes the console, metrics and the shared files of a checkpoint.
#include <functional>
#include <memory>
#include <string>

#include "hone/config/config.hpp"
#include "hone/dist/data_parallel.hpp"
#include "hone/dist/mesh.hpp"
#include "hone/io/checkpoint.hpp"

namespace hone {

class TrainingWorld {
 public:
  // Reads distributed.tp, distributed.zero and distributed.bucket_mb. With
  // several ranks on one node a `cuda` device becomes cuda:LOCAL_RANK.
  TrainingWorld(const Config& config, Device device);
  ~TrainingWorld();

  Device device() const { return device_; }
  int rank() const { return world_->rank(); }
  int size() const { return world_->size(); }
  bool is_main() const { return rank() == 0; }
  int dp_rank() const { return mesh_->dp_rank(); }
  int dp_size() const { return mesh_->dp_size(); }
  int tp_size() const { return mesh_->tp_size(); }
  int zero_stage() const { return zero_stage_; }
  // Gradients are reduced in buckets of this size while backward runs (0: after it).
  int64_t bucket_bytes() const { return data_parallel_->bucket_bytes(); }
  // What a Transformer of this run is built with: ZeRO-1/2 pad its trained
  // flat buffers so that they cut into equal shards; at ZeRO-3 on several ranks
  // it stores this data-parallel rank's chunks (the whole model is never built
  // on a rank); tensor parallelism splits it over the tp group.
  ModelPlacement model_placement() const;
  // Takes on the model built with model_placement(): at ZeRO-2 gives each unit
  // of the trained parameters a gradient buffer only while backward computes
  // it; at ZeRO-3 makes it gather each unit of its weights (with LoRA the
  // frozen base and the adapters) when it needs it. (Stages 2 and 3 on
  // several dp ranks.)
  void adopt(Transformer& model);
  // Rank 0 holds every weight whole (no ZeRO-3 shards, no tensor-parallel parts).
  bool weights_whole_on_main() const { return (zero_stage_ < 3 || dp_size() == 1) && tp_size() == 1; }
  // Collective: calls `write` on rank 0 with each trained parameter whole, in
  // CheckpointWeights::order, with only one unit of them whole at a time
  // (ZeRO-3 shards gathered, tensor-parallel parts put together).
  void for_each_whole_parameter(const Transformer& model,
                                const std::function<void(const Parameter&, const Tensor&)>& write) const;
  // The data-parallel training of train_step; null in a world of one process.
  dist::DataParallel* data_parallel() const { return size() > 1 ? data_parallel_.get() : nullptr; }
  // [offset, count) of the flat trained buffers this rank's optimizer updates.
  std::pair<int64_t, int64_t> optimizer_shard(int64_t padded) const { return data_parallel_->shard(padded); }

  // Over the data-parallel group (tensor-parallel ranks see the same batches).
  double sum(double local) const { return data_parallel_->sum(local); }
  // True on every rank of the world when it is true on any (a stop request that
  // reached some ranks): the data-parallel group alone would leave the other
  // tensor-parallel ranks training while these stop.
  bool any(bool local) const { return dist::sum_over(*world_, local ? 1.0 : 0.0, device_) > 0; }
  void barrier() const { world_->barrier(); }
  // An error on every rank when a rank's `value` differs from rank 0's (`what`
  // names it: the data's size): the same config read in another working
  // directory, or node-local copies that differ, give other data, whose replica
  // would train apart or whose step budget would hang a collective.
  void check_same_data(const std::string& what, int64_t value) const;

  // save_checkpoint by every rank together: rank 0 prepares the folder and writes
  // the weights (a unit at a time, for_each_whole_parameter), the state and the
  // manifest; each rank writes its optimizer shard. Returns the folder (on every rank). companion_files: as for
  // hone::save_checkpoint.
  std::string save_checkpoint(const std::string& run_dir, const Transformer& model, const AdamW& optimizer,
                              const TrainerState& state, int64_t keep_last_n,
                              const std::vector<std::string>& companion_files) const;

 private:
  Device device_;
  int zero_stage_;
  std::unique_ptr<dist::Communicator> world_;
  std::unique_ptr<dist::DeviceMesh> mesh_;
  std::unique_ptr<dist::DataParallel> data_parallel_;
};

}  // namespace hone
