#pragma once
// `hone plan`: the memory per device and the time of a distributed training run,
// estimated from the model's sizes and a few hardware figures, before any job is
// queued. The model is written down in docs/distributed.md; in short:
//   memory   fp32 master weights 4 B, fp32 gradients 4 B, AdamW 8 B per parameter
//            (+2 B bf16 compute copy) of what a tp rank holds (its part of the
//            projections, all of embeddings, head and norms), split over dp by
//            ZeRO stage (1: optimizer, 2: + gradients, 3: + weights);
//            activations from hone's own activation planner for a tp rank;
//   compute  PaLM's FLOPs per token × tokens per device / (peak × MFU);
//   network  ring algorithms: per device, all_reduce sends 2(n-1)/n of the buffer,
//            all_gather and reduce_scatter (n-1)/n; a group inside one node uses
//            the intra-node link, one that spans nodes the inter-node link.
#include <cstdint>

#include "hone/core/dtype.hpp"
#include "hone/model/config.hpp"

namespace hone::dist {

// What hone's ZeRO-3 holds whole at once on a device, in bytes (one replica,
// a tp rank's part of each layer): two units (one in use, the next prefetched:
// the largest of the embeddings, a layer and the output head, twice) and tied
// embeddings throughout, each with fp32 master weights, their cast for a bf16
// run and fp32 gradients (the projections of a bf16 run only their bf16 copy
// and gradients); and the gradients of the layer whose reduce_scatter is in flight.
double zero3_gathered_bytes(const ModelConfig& model, DType dtype, int tp = 1);
// What hone's ZeRO-2 holds of gradients besides its shard, in bytes: a unit's
// fp32 gradients while backward computes it, the previous unit's while their
// reduction is in flight and this rank's sum of them (the larger of a layer
// and the embedding table, three times), and tied embeddings' throughout.
double zero2_unit_gradient_bytes(const ModelConfig& model, int tp = 1);

struct Hardware {
  double peak_flops = 0;       // per device, in the run's dtype (FLOP/s)
  double memory_bytes = 0;     // per device
  double intra_node_bw = 0;    // bytes/s per device within a node (NVLink, xGMI)
  double inter_node_bw = 0;    // bytes/s per device between nodes (its NIC)
  int devices_per_node = 8;
};

struct PlanInput {
  ModelConfig model;
  DType dtype = DType::bf16;
  int64_t micro_batch = 1;  // sequences per device per micro-batch
  int64_t seq_len = 0;
  int64_t grad_accum = 1;   // micro-batches per optimizer step
  int dp = 1, tp = 1;
  int zero = 0;             // ZeRO stage 0..3 (3 = FSDP)
  bool activation_checkpointing = false;
  double mfu = 0.4;         // model FLOPs utilisation assumed for compute
  double tokens = 0;        // the token budget to train
  Hardware hw;
};

struct Plan {
  // Bytes per device.
  double weights = 0, gradients = 0, optimizer = 0, compute_copy = 0;
  double gathered = 0;  // ZeRO-3: the units whole at once (embeddings, head, two layers) and their gradients
  double activations = 0, activations_checkpointed = 0;  // without / with activation checkpointing
  double state() const { return weights + gradients + optimizer + compute_copy + gathered; }
  double total = 0;  // state + the activations the input asks for
  bool fits = false;
  // Per optimizer step, per device.
  double tokens_per_step = 0;  // global
  double flops = 0, compute_s = 0;
  double dp_bytes = 0, tp_bytes = 0;  // bytes each device sends
  bool dp_inter_node = false, tp_inter_node = false;
  double dp_s = 0, tp_s = 0;
  double step_s = 0;          // compute, then communication
  double step_overlap_s = 0;  // data-parallel traffic hidden behind compute
  double steps = 0;
  double train_s = 0, train_overlap_s = 0;
};

// Throws hone::Error naming the input that is out of range.
Plan plan_run(const PlanInput& in);

}  // namespace hone::dist
