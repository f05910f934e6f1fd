#pragma once
// AdamW over a ParameterSet: fp32 moments (16 bytes per parameter with the master
// weights and gradients), one fused update per weight-decay group that also
// refreshes the bf16 compute copy.
#include "hone/model/parameters.hpp"
#include "hone/ops/ops.hpp"

namespace hone {

struct AdamWConfig {
  double lr = 3e-4;
  double beta1 = 0.9, beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // applied to the parameters declared with decay
};

class AdamW {
 public:
  // Updates the elements [shard_offset, shard_offset + shard_count) of the stored
  // flat parameter buffers and keeps moments for those only (ZeRO-1/2: each
  // data-parallel rank owns one shard; ZeRO-3: the set itself is sharded and its
  // stored buffers are this rank's part); by default all of them.
  AdamW(ParameterSet& params, AdamWConfig config, int64_t shard_offset = 0, int64_t shard_count = -1);

  // One update of the shard with learning rate `lr` from `grads` (the shard's
  // gradients; by default the shard of params.grads()), multiplied by grad_scale
  // (gradient clipping, in the same pass).
  void step(double lr, double grad_scale = 1.0, const Tensor& grads = {});
  int64_t steps_taken() const { return step_; }
  int64_t shard_offset() const { return offset_; }
  int64_t shard_count() const { return m_.numel(); }

  // True when the moments cover every parameter in the flat layout's order (no ZeRO).
  bool holds_everything() const;
  // Which runs of the flat layout the moments hold (`stored`: index into exp_avg()).
  std::vector<ParameterSet::StoredRange> moment_ranges() const;
  // Moments of the shard (flat, [shard_count]) and step count, for checkpoints.
  const Tensor& exp_avg() const { return m_; }
  const Tensor& exp_avg_sq() const { return v_; }
  void set_steps_taken(int64_t step) { step_ = step; }
  const AdamWConfig& config() const { return config_; }

 private:
  ParameterSet& params_;
  AdamWConfig config_;
  int64_t offset_;
  Tensor m_, v_;
  int64_t step_ = 0;
};

// The global L2 norm of all gradients.
double grad_norm(const ParameterSet& params);
// What torch.nn.utils.clip_grad_norm_ multiplies gradients by so that their norm
// is at most max_norm: max_norm / (norm + 1e-6) when that is below 1, else 1.
// max_norm <= 0 disables clipping.
double clip_coefficient(double norm, double max_norm);

}  // namespace hone
