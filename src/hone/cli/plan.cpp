// hone plan CONFIG [key=value ...] --world-size W [--tp T] [--zero 0|1|2|3] [--peak-tflops P]
//           [--memory-gb M] [--link-gbps L] [--inter-node-gbps I] [--devices-per-node D] [--mfu U]
//           [--tokens N]
// Sizes a distributed run before it is queued: memory per device, step time (compute and
// communication) and the time to train a token budget (the model: docs/distributed.md). The
// last line printed is one JSON object with every figure.
#include <fmt/format.h>

#include <fmt/ranges.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "hone/cli/commands.hpp"
#include "hone/core/error.hpp"
#include "hone/dist/plan.hpp"
#include "hone/train/recipes.hpp"
#include "hone/train/run_config.hpp"

namespace hone::cli {
namespace {

struct Args {
  ConfigArguments config;
  int world_size = 0, dp = 0, devices_per_node = 8;
  std::optional<int> tp, zero;  // default: the config's distributed.tp and distributed.zero
  // One H100 SXM node: 80 GB, NVLink 4 (900 GB/s), one 400 Gb/s NIC per GPU; the
  // dense peak in the run's dtype (kH100Peak) unless given.
  std::optional<double> peak_tflops;
  double memory_gb = 80, link_gbps = 7200, inter_node_gbps = 400, mfu = 0.4, tokens = 0;
};

std::string duration(double seconds) {
  if (seconds < 1) return fmt::format("{:.1f} ms", seconds * 1e3);
  if (seconds < 120) return fmt::format("{:.2f} s", seconds);
  if (seconds < 7200) return fmt::format("{:.1f} min", seconds / 60);
  if (seconds < 3 * 86400) return fmt::format("{:.1f} h", seconds / 3600);
  return fmt::format("{:.1f} days", seconds / 86400);
}

std::string gb(double bytes) { return fmt::format("{:.2f} GB", bytes / 1e9); }

// For a plan that does not fit: the fastest of the higher ZeRO stages and
// activation checkpointing that fits. Checkpointing is charged its recompute,
// a third of the compute (one more forward pass), which the plan's step time
// leaves out as MFU does.
std::string fitting_change(const dist::PlanInput& in) {
  struct Candidate {
    int zero;
    bool checkpointing;
    double bytes, seconds;
  };
  std::optional<Candidate> best;
  for (int zero = in.zero; zero <= 3; ++zero) {
    for (const bool checkpointing : {false, true}) {
      if (zero == in.zero && checkpointing == in.activation_checkpointing) continue;
      if (in.activation_checkpointing && !checkpointing) continue;
      dist::PlanInput changed = in;
      changed.zero = zero;
      changed.activation_checkpointing = checkpointing;
      const dist::Plan p = dist::plan_run(changed);
      const double seconds = p.step_overlap_s;
      if (p.fits && (!best || seconds < best->seconds)) best = Candidate{zero, checkpointing, p.total, seconds};
    }
  }
  if (!best) {
    return "no ZeRO stage fits, with or without activation checkpointing: a larger --tp, a smaller batch_size or "
           "more devices";
  }
  std::vector<std::string> changes;
  if (best->zero != in.zero) changes.push_back(fmt::format("distributed.zero={}", best->zero));
  if (best->checkpointing != in.activation_checkpointing) changes.push_back("enable_activation_checkpointing=true");
  return fmt::format("{} fits: {} per device, about {} a step with data-parallel traffic hidden behind compute (the "
                     "fastest of the layouts that fit)",
                     fmt::join(changes, " "), gb(best->bytes), duration(best->seconds));
}

int run(const Args& a) {
  const auto [recipe, c] = a.config.resolved("plan");
  HONE_CHECK(recipe.training_shape != nullptr,
             "{}: a config of the {} recipe; hone plan sizes training: give a pretrain or full_finetune config",
             c.origin(), recipe.name);
  HONE_CHECK(!c.has("model.lora_rank"),
             "{}: hone plan sizes full-parameter training; LoRA's adapters are too small to need a plan", c.origin());
  HONE_CHECK(!trains_preferences(c),
             "{}: hone plan sizes pretraining and full fine-tuning; DPO's reference passes and frozen copy are not in "
             "its model yet (hone validate and hone bench count them on one device)",
             c.origin());
  const TrainingShape shape = recipe.training_shape(c);

  dist::PlanInput in;
  in.model = shape.model;
  in.dtype = run_settings_from(c).dtype;
  in.micro_batch = shape.batch_size;
  in.seq_len = shape.seq_len;
  in.grad_accum = c.get<int64_t>("gradient_accumulation_steps");
  in.activation_checkpointing = c.get<bool>("enable_activation_checkpointing");
  HONE_CHECK(a.world_size > 0 || a.dp > 0, "give --world-size (or --dp) to plan for");
  HONE_CHECK(a.mfu <= 1, "--mfu is a fraction of the peak: at most 1, got {}", a.mfu);
  const int tp = a.tp.value_or(int(c.get<int64_t>("distributed.tp")));
  HONE_CHECK(tp >= 1, "--tp must be at least 1, got {}", tp);
  const int world = a.world_size > 0 ? a.world_size : a.dp * tp;
  HONE_CHECK(world % tp == 0, "--world-size {} is not a multiple of --tp {}", world, tp);
  in.tp = tp;
  in.dp = world / tp;
  HONE_CHECK(a.dp == 0 || a.dp == in.dp, "--dp {} x --tp {} does not equal --world-size {}", a.dp, tp, world);
  in.zero = a.zero.value_or(int(c.get<int64_t>("distributed.zero")));
  in.mfu = a.mfu;
  // The budget: --tokens, else the config's max_tokens, or max_steps of its global batch.
  const double tokens_per_step = double(in.micro_batch * in.seq_len * in.grad_accum * in.dp);
  in.tokens = a.tokens > 0             ? a.tokens
              : c.has("max_tokens")    ? double(c.get<int64_t>("max_tokens"))
              : c.has("max_steps")     ? double(c.get<int64_t>("max_steps")) * tokens_per_step
                                       : 0;
  // H100 SXM's dense peaks: bf16 989 TFLOP/s; fp32 67 (hone's fp32 products take no TF32).
  const double peak_tflops = a.peak_tflops.value_or(in.dtype == DType::bf16 ? 989 : 67);
  in.hw = {.peak_flops = peak_tflops * 1e12,
           .memory_bytes = a.memory_gb * 1e9,
           .intra_node_bw = a.link_gbps * 1e9 / 8,
           .inter_node_bw = a.inter_node_gbps * 1e9 / 8,
           .devices_per_node = a.devices_per_node};
  const dist::Plan p = dist::plan_run(in);

  const ModelConfig& m = in.model;
  fmt::print("model      {}: {:.2f}B parameters, {} layers, dim {}; {}, {}{}\n", m.name, double(m.num_params()) / 1e9,
             m.n_layers, m.dim, describe_batch(in.micro_batch, in.seq_len, in.grad_accum), dtype_name(in.dtype),
             in.activation_checkpointing ? ", activation checkpointing" : "");
  fmt::print("layout     {} devices = dp {} x tp {}, ZeRO stage {}; {} devices per node\n", world, in.dp, in.tp,
             in.zero, in.hw.devices_per_node);
  fmt::print("hardware   {:.0f} TFLOP/s peak at MFU {:.2f}, {:.0f} GB, links {:.0f} Gb/s ({:.0f} GB/s) in a node, "
             "{:.0f} Gb/s ({:.0f} GB/s) between nodes\n",
             peak_tflops, a.mfu, a.memory_gb, a.link_gbps, a.link_gbps / 8, a.inter_node_gbps,
             a.inter_node_gbps / 8);
  fmt::print("\nmemory per device\n");
  fmt::print("  weights (fp32)        {:>10}\n", gb(p.weights));
  fmt::print("  gradients (fp32)      {:>10}\n", gb(p.gradients));
  fmt::print("  AdamW moments         {:>10}\n", gb(p.optimizer));
  if (p.compute_copy > 0) fmt::print("  bf16 weight copy      {:>10}\n", gb(p.compute_copy));
  if (p.gathered > 0) fmt::print("  gathered units        {:>10}\n", gb(p.gathered));
  fmt::print("  activations           {:>10} without checkpointing, {} with\n", gb(p.activations),
             gb(p.activations_checkpointed));
  fmt::print("  total                 {:>10} ({} of {:.0f} GB{})\n", gb(p.total), p.fits ? "fits" : "DOES NOT FIT",
             a.memory_gb, in.activation_checkpointing ? "" : "; with activation checkpointing " +
                                                                 gb(p.state() + p.activations_checkpointed));
  if (!p.fits) fmt::print("  hint: {}\n", fitting_change(in));
  fmt::print("\nper optimizer step ({:.0f} tokens)\n", p.tokens_per_step);
  fmt::print("  compute               {:>10}  ({:.3g} FLOPs per device{})\n", duration(p.compute_s), p.flops,
             in.activation_checkpointing ? ", and a third more recomputed" : "");
  fmt::print("  data parallel         {:>10}  ({} sent per device, {})\n", duration(p.dp_s), gb(p.dp_bytes),
             p.dp_inter_node ? "between nodes" : "in a node");
  fmt::print("  tensor parallel       {:>10}  ({} sent per device, {})\n", duration(p.tp_s), gb(p.tp_bytes),
             p.tp_inter_node ? "between nodes" : "in a node");
  fmt::print("  step                  {:>10}  ({} with data-parallel traffic hidden behind compute)\n",
             duration(p.step_s), duration(p.step_overlap_s));
  if (p.steps > 0) {
    fmt::print("\ntraining {:.3g} tokens: {:.0f} steps, {} ({} with overlap)\n", in.tokens, p.steps,
               duration(p.train_s), duration(p.train_overlap_s));
  }
  nlohmann::json j = {{"model", m.name},
                      {"params", m.num_params()},
                      {"world_size", world},
                      {"dp", in.dp},
                      {"tp", in.tp},
                      {"zero", in.zero},
                      {"weights_bytes", p.weights},
                      {"gradients_bytes", p.gradients},
                      {"optimizer_bytes", p.optimizer},
                      {"compute_copy_bytes", p.compute_copy},
                      {"gathered_bytes", p.gathered},
                      {"activations_bytes", p.activations},
                      {"activations_checkpointed_bytes", p.activations_checkpointed},
                      {"total_bytes", p.total},
                      {"fits", p.fits},
                      {"tokens_per_step", p.tokens_per_step},
                      {"flops_per_device", p.flops},
                      {"compute_s", p.compute_s},
                      {"dp_bytes", p.dp_bytes},
                      {"dp_s", p.dp_s},
                      {"tp_bytes", p.tp_bytes},
                      {"tp_s", p.tp_s},
                      {"step_s", p.step_s},
                      {"step_overlap_s", p.step_overlap_s},
                      {"tokens", in.tokens},
                      {"steps", p.steps},
                      {"train_s", p.train_s},
                      {"train_overlap_s", p.train_overlap_s}};
  fmt::print("{}\n", j.dump());
  return 0;
}

}  // namespace

Command add_plan(CLI::App& app) {
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "plan", "Estimate memory per device, step time and time to train of a distributed run (defaults: H100 SXM "
              "nodes)");
  a->config.add_to(*sub);
  sub->add_option("--world-size", a->world_size, "Devices in the job")->check(positive_count());
  sub->add_option("--dp", a->dp, "Data-parallel size (default: world size / tp)")->check(positive_count());
  sub->add_option("--tp", a->tp, "Tensor-parallel size (default: the config's distributed.tp)")
      ->check(positive_count());
  sub->add_option("--zero", a->zero, "ZeRO stage: 0 replicas, 1 sharded optimizer, 2 + gradients, 3 + weights "
                                     "(FSDP) (default: the config's distributed.zero)");
  sub->add_option("--peak-tflops", a->peak_tflops,
                  "Peak TFLOP/s per device in the run's dtype (default: H100 SXM's dense figure, 989 in bf16, 67 in "
                  "fp32)")
      ->check(positive_number());
  sub->add_option("--memory-gb", a->memory_gb, "Memory per device (GB)")
      ->check(positive_number())
      ->capture_default_str();
  sub->add_option("--link-gbps", a->link_gbps, "Bandwidth per device within a node, Gbit/s (NVLink 4: 7200)")
      ->check(positive_number())
      ->capture_default_str();
  sub->add_option("--inter-node-gbps", a->inter_node_gbps, "Bandwidth per device between nodes, Gbit/s (NDR "
                                                           "InfiniBand: 400)")
      ->check(positive_number())
      ->capture_default_str();
  sub->add_option("--devices-per-node", a->devices_per_node, "Devices in one node")
      ->check(positive_count())
      ->capture_default_str();
  sub->add_option("--mfu", a->mfu, "Model FLOPs utilisation to assume (at most 1)")
      ->check(positive_number())
      ->capture_default_str();
  sub->add_option("--tokens", a->tokens, "Token budget (default: the config's max_tokens, or max_steps of its global "
                                         "batch)")
      ->check(positive_number());
  return [a] { return run(*a); };
}

}  // namespace hone::cli
