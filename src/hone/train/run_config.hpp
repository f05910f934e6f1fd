#pragma once
// The keys recipes accept (schemas shared between recipes) and their
// translation from a resolved Config into the engine's typed settings.
#include <optional>
#include <string>

#include "hone/config/config.hpp"
#include "hone/core/device.hpp"
#include "hone/model/config.hpp"
#include "hone/model/lora.hpp"
#include "hone/optim/adamw.hpp"
#include "hone/optim/lr_schedule.hpp"

namespace hone {

// output_dir, seed, device, dtype, threads.
Schema run_schema();
// checkpoint.path (`what` the model is for) and checkpoint.format (auto, or
// the format the model must have: hf, meta, hone, llmc, llama2c, nanogpt).
Schema model_source_schema(const std::string& what, bool required = true);
// An error naming `key` unless `path` (its value, or a file it names: a
// Megatron prefix's .idx) exists; a relative path's names the working
// directory it is read from (a built-in config run from another folder).
void check_path_exists(const Config& config, std::string_view key, const std::string& path);
// The tokenizer of a recipe that starts from checkpoint.path: tokenizer.path, or
// else the model's own folder (a run's latest checkpoint), which must hold one.
std::string tokenizer_path_for_model(const Config& config);
// model.*: a built-in model by name, and any field of it overridden.
Schema model_schema();
// batch_size, gradient_accumulation_steps, max_steps/epochs/max_tokens,
// optimizer.*, lr_scheduler.*, checkpoint.*, resume, log_every_n_steps, eval.*,
// enable_activation_checkpointing, max_consecutive_nonfinite, logging.*,
// distributed.*.
Schema training_schema();
// dataset.* and tokenizer.path of the pretrain recipe.
Schema pretrain_dataset_schema();
// dataset.token_encoding_type: how MDS `bytes` tokens are read (pretrain, eval, fine-tuning).
Schema mds_tokens_schema();
// dataset.block_causal and dataset.eod_mask_loss: what a pretraining sample
// does at its documents' boundaries (pretrain, eval).
Schema document_boundaries_schema();

struct RunSettings {
  std::string output_dir;
  uint64_t seed = 0;
  Device device;
  DType dtype = DType::f32;
  int threads = 0;
};
RunSettings run_settings_from(const Config& config);
ModelConfig model_config_from(const Config& config);
// `model` with the model.* keys `config` sets applied and checked; with
// `name_changes` its name says what they changed ("llama_tiny with dim 256").
ModelConfig with_model_keys(const Config& config, ModelConfig model, bool name_changes);

// The sequence length at `key`, or when it is unset `fallback` cut to the
// model's max_seq_len; a length beyond the model's max_seq_len is an error
// naming where it came from.
int64_t sequence_length_for(const Config& config, std::string_view key, int64_t fallback, const ModelConfig& model);
// The multiple that instruct batches' rows are cut to (data::SampleStreamOptions::
// length_multiple): dataset.pad_to_multiple_of, or where it is unset 128 on a
// GPU (cuDNN's fused attention takes lengths that are multiples of 128; each
// length is planned once) and 64 on the CPU; and a multiple of distributed.tp,
// whose ranks split a batch's positions.
int64_t sample_length_multiple(const Config& config, Device device);
// enable_activation_checkpointing, enable_activation_offloading (which needs
// checkpointing and device: cuda) and distributed.tp.
ActivationOptions activation_options_from(const Config& config);
AdamWConfig adamw_config_from(const Config& config);
// The schedule for a run of total_steps optimizer steps.
LrSchedule lr_schedule_from(const Config& config, int64_t total_steps);

// Memory a training run needs on its device, before it starts: fp32 master
// weights, gradients and AdamW moments (16 B/param), the bf16 compute copy in
// mixed precision (2 B/param), and the planned activations. With LoRA the base
// has no gradients or moments, only the adapters do, and it is kept in the
// compute dtype alone (bf16: 2 B/param); the adapters' own activations count too.
struct MemoryEstimate {
  size_t parameters = 0, gradients = 0, optimizer = 0, compute_copy = 0, gathered = 0, activations = 0;
  size_t workspace = 0;     // cuBLASLt's and cuDNN attention's (ops::gemm_workspace_bytes, attention_scratch_bytes)
  size_t reference = 0;     // full-weight DPO's frozen reference model (reference_model_bytes)
  int zero = 0, ranks = 1;  // per rank of this many data-parallel ranks at this ZeRO stage
  int tp = 1;               // and of this many tensor-parallel ranks
  size_t total() const {
    return parameters + gradients + optimizer + compute_copy + gathered + activations + workspace + reference;
  }
};
// Per rank of `ranks` data-parallel ranks at ZeRO stage `zero`, as hone shards:
// 1 the moments; 2 also the gradients (a shard, and the units backward is at); 3 the
// weights, gradients and moments, plus the units gathered at once. Tensor
// parallelism over `tp` ranks splits the projections and the activations.
// Activations as `activations` lays them out (checkpointing, offloading, tp).
// On `device`, what its GEMM library keeps too.
MemoryEstimate estimate_training_memory(const ModelConfig& model, DType dtype, int64_t batch_size, int64_t seq_len,
                                        const ActivationOptions& activations,
                                        const std::optional<LoraConfig>& lora = {}, int zero = 0, int ranks = 1,
                                        Device device = Device::cpu());
// A frozen copy of the model, which full-weight DPO runs its reference passes
// on: its weights in the compute dtype, and its activations, which it plans
// with checkpointing (a forward pass keeps only the layer inputs).
size_t reference_model_bytes(const ModelConfig& model, DType dtype, int64_t batch_size, int64_t seq_len,
                             Device device = Device::cpu());
// "memory estimate on cpu (bf16): total = weights + gradients + ...", for a run's banner.
std::string describe(const MemoryEstimate& estimate, const RunSettings& run);
// On the CPU, an estimate past this machine's memory is refused before the
// model is allocated (the kernel would kill the run as it filled, without a
// word); hone validate notes it (describe). A GPU's memory is known once it runs.
void check_fits_host_memory(const MemoryEstimate& estimate, const RunSettings& run, const Config& c);

// "8 x 256 tokens per micro-batch, 1 micro-batch per step": a run's banner, hone plan.
std::string describe_batch(int64_t batch_size, int64_t seq_len, int64_t gradient_accumulation_steps);

}  // namespace hone
