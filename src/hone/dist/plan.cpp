#include "hone/dist/plan.hpp"

#include <algorithm>
#include <cmath>

#include "hone/core/error.hpp"
#include "hone/model/activations.hpp"

namespace hone::dist {

namespace {

// Parameters of a tp rank's part of one layer, and of the embedding table.
double layer_params(const ModelConfig& m, int tp) {
  const int64_t split = m.num_projection_params();
  return double(m.num_non_embedding_params() - split + split / tp) / double(m.n_layers);
}

double table_params(const ModelConfig& m, int tp) {
  return double(m.vocab_size * m.dim) / (m.splits_vocabulary(tp) ? tp : 1);
}

// What only GEMMs read (Parameter::compute_only): a tp rank's projection
// weights of one layer (not biases), and its rows of an untied output projection.
double layer_gemm_weights(const ModelConfig& m, int tp) {
  return double(m.num_projection_weights() / m.n_layers) / tp;
}
double head_gemm_weights(const ModelConfig& m, int tp) { return m.tie_embeddings ? 0.0 : table_params(m, tp); }

}  // namespace

double zero3_gathered_bytes(const ModelConfig& m, DType dtype, int tp) {
  // Bytes per element of a gathered unit: fp32 master weights and gradients,
  // and in bf16 their cast; what only GEMMs read comes as its bf16 copy alone.
  const bool bf16 = dtype == DType::bf16;
  const double whole = bf16 ? 10 : 8, gemm_only = bf16 ? 6 : 8;
  const double layer = layer_params(m, tp), layer_gemm = layer_gemm_weights(m, tp);
  const double embeddings = whole * table_params(m, tp);
  const double layer_unit = gemm_only * layer_gemm + whole * (layer - layer_gemm);
  const double head = gemm_only * head_gemm_weights(m, tp);
  return 2 * std::max({embeddings, layer_unit, head}) + (m.tie_embeddings ? embeddings : 0) + 4 * layer;
}

double zero2_unit_gradient_bytes(const ModelConfig& m, int tp) {
  const double layer = layer_params(m, tp), table = table_params(m, tp);
  return 4 * (3 * std::max(layer, table) + (m.tie_embeddings ? table : 0));
}

Plan plan_run(const PlanInput& in) {
  HONE_CHECK(in.dp >= 1 && in.tp >= 1, "dp ({}) and tp ({}) must be at least 1", in.dp, in.tp);
  HONE_CHECK(in.zero >= 0 && in.zero <= 3, "ZeRO stage {} is not 0, 1, 2 or 3", in.zero);
  HONE_CHECK(in.mfu > 0 && in.mfu <= 1, "MFU {} must be in (0, 1]", in.mfu);
  HONE_CHECK(in.micro_batch >= 1 && in.seq_len >= 1 && in.grad_accum >= 1,
             "batch {}, sequence length {} and accumulation steps {} must be positive", in.micro_batch, in.seq_len,
             in.grad_accum);
  HONE_CHECK(in.hw.peak_flops > 0 && in.hw.memory_bytes > 0 && in.hw.intra_node_bw > 0 && in.hw.inter_node_bw > 0 &&
                 in.hw.devices_per_node >= 1,
             "the hardware figures (peak FLOP/s, memory, link bandwidths, devices per node) must be positive");
  in.model.check_tensor_parallel(in.tp);
  const ModelConfig& m = in.model;
  const double dp = in.dp, tp = in.tp;
  const double params = double(m.num_params_per_rank(in.tp));  // per device of one replica
  const double w = in.dtype == DType::bf16 ? 2 : 4;    // bytes of a weight or activation as computed

  Plan p;
  p.weights = 4 * params / (in.zero >= 3 ? dp : 1);
  p.gradients = 4 * params / (in.zero >= 2 ? dp : 1) + (in.zero == 2 && in.dp > 1 ? zero2_unit_gradient_bytes(m, in.tp) : 0);
  p.optimizer = 8 * params / (in.zero >= 1 ? dp : 1);
  // ZeRO-3 keeps no compute copy: the gathered units hold their casts.
  p.compute_copy = in.dtype == DType::bf16 && in.zero < 3 ? 2 * params : 0;
  if (in.zero >= 3 && in.dp > 1) {
    p.gathered = zero3_gathered_bytes(m, in.dtype, in.tp);
  }
  // Pretraining on GPUs: every weight trained, the head's too; rows of logits padded.
  ActivationOptions activations{.tp = in.tp, .head_weight_gradient = true, .padded_logit_rows = true};
  p.activations = double(activation_bytes(m, in.dtype, in.micro_batch, in.seq_len, activations));
  activations.checkpointing = true;
  p.activations_checkpointed = double(activation_bytes(m, in.dtype, in.micro_batch, in.seq_len, activations));
  p.total = p.state() + (in.activation_checkpointing ? p.activations_checkpointed : p.activations);
  p.fits = p.total <= in.hw.memory_bytes;

  const double tokens_per_replica = double(in.micro_batch * in.seq_len * in.grad_accum);
  p.tokens_per_step = tokens_per_replica * dp;
  p.flops = m.training_flops_per_token(in.seq_len) * tokens_per_replica / tp;
  // Activation checkpointing computes each layer's forward pass again: a third
  // more work, in the time; the model FLOPs (MFU's) stay as they are.
  p.compute_s = p.flops * (in.activation_checkpointing ? 4.0 / 3.0 : 1.0) / (in.hw.peak_flops * in.mfu);

  const double g = double(in.grad_accum);
  const double ring = (dp - 1) / dp;  // all_gather / reduce_scatter; all_reduce sends twice this
  const double grads = 4 * params, weights = w * params;
  // ZeRO-3 in bf16 gathers the projections' bf16 copies (all GEMMs read) and
  // the rest (norms, biases, embeddings) as fp32 master weights.
  const double gemm = double(m.n_layers) * layer_gemm_weights(m, in.tp) + head_gemm_weights(m, in.tp);
  switch (in.zero) {
    case 0: p.dp_bytes = 2 * ring * grads; break;                  // all_reduce of the gradients
    case 1: p.dp_bytes = ring * (grads + weights); break;          // reduce_scatter, all_gather the update
    case 2: p.dp_bytes = ring * (g * grads + weights); break;      // reduce_scatter every micro-batch
    default: {  // gather the weights for forward and again for backward, reduce_scatter the gradients
      const double gathered = in.dtype == DType::bf16 ? 2 * gemm + 4 * (params - gemm) : 4 * params;
      p.dp_bytes = g * ring * (2 * gathered + grads);
      break;
    }
  }
  // Sequence parallelism: per layer an all_gather and a reduce_scatter of the
  // activations (together what an all_reduce sends) around attention and
  // around the MLP forward, the same backward, and again when the forward pass
  // is recomputed; a split vocabulary adds the same around the embedding
  // lookup and the output projection, forward and backward; once per step, an
  // all_reduce of the gradients of what every tp rank holds whole (norms;
  // embeddings and head unless the vocabulary is split).
  const double activation = double(in.micro_batch * in.seq_len * m.dim) * w;
  const double tp_all_reduces =
      double(m.n_layers) * (in.activation_checkpointing ? 6 : 4) + (m.splits_vocabulary(in.tp) ? 2 : 0);
  const double replicated = double(m.num_params() - m.num_split_params(in.tp));
  p.tp_bytes = 2 * (tp - 1) / tp * (g * tp_all_reduces * activation + (in.tp > 1 ? 4 * replicated : 0));

  p.tp_inter_node = in.tp > in.hw.devices_per_node;
  p.dp_inter_node = in.dp * in.tp > in.hw.devices_per_node;
  p.dp_s = p.dp_bytes / (p.dp_inter_node ? in.hw.inter_node_bw : in.hw.intra_node_bw);
  p.tp_s = p.tp_bytes / (p.tp_inter_node ? in.hw.inter_node_bw : in.hw.intra_node_bw);
  p.step_s = p.compute_s + p.dp_s + p.tp_s;
  // Tensor-parallel all_reduces sit between the layer's GEMMs and are not hidden.
  p.step_overlap_s = std::max(p.compute_s, p.dp_s) + p.tp_s;
  p.steps = in.tokens > 0 ? std::ceil(in.tokens / p.tokens_per_step) : 0;
  p.train_s = p.steps * p.step_s;
  p.train_overlap_s = p.steps * p.step_overlap_s;
  return p;
}

}  // namespace hone::dist
