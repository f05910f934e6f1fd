// hone bench --model NAME|CONFIG [key=value ...] --batch-size B --seq-len T [--max-seq-len L] --dtype fp32|bf16
//            --steps N [--threads K] [--device cpu|cuda] [--activation-checkpointing [--activation-offloading]]
//            [--lora-rank R] [--peak-tflops P]
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>

#include "hone/cli/builtin_configs.hpp"
#include "hone/cli/commands.hpp"
#include "hone/core/device.hpp"
#include "hone/core/error.hpp"
#include "hone/train/bench.hpp"
#include "hone/train/recipes.hpp"
#include "hone/train/run_config.hpp"

namespace hone::cli {

namespace {

bool is_model_preset(const std::string& name) {
  const std::vector<std::string> names = model_preset_names();
  return std::ranges::find(names, name) != names.end();
}

// The benchmark of a training config: what one micro-batch of it trains (the
// model, batch, sequence length, adapters) in its dtype, on its device, with
// its threads, seed and activation checkpointing or offloading.
BenchOptions options_from_config(Config config, const std::vector<std::string>& overrides) {
  // hone bench writes nothing: the output_dir a training recipe requires may be left out.
  const bool training = config.has("recipe") && find_recipe(config.get<std::string>("recipe")).training_shape;
  if (training && !config.has("output_dir")) config.set("output_dir", "(hone bench writes no output)");
  const auto [recipe, c] = resolve_with_its_recipe(std::move(config), overrides);
  HONE_CHECK(recipe.training_shape != nullptr,
             "{}: a config of the {} recipe; hone bench times training: give a pretrain, full_finetune, "
             "lora_finetune, lora_dpo or full_dpo config, or a built-in model",
             c.origin(), recipe.name);
  const int tp = int(c.get<int64_t>("distributed.tp"));
  HONE_CHECK(tp == 1, "{}: distributed.tp {}: hone bench runs one process, without tensor parallelism (override "
             "distributed.tp=1)", c.origin_of("distributed.tp"), tp);
  const TrainingShape shape = recipe.training_shape(c);
  const RunSettings run = run_settings_from(c);
  const ActivationOptions activations = activation_options_from(c);
  BenchOptions o;
  o.config = c.origin();
  o.model = shape.model;
  o.batch_size = shape.batch_size;
  o.seq_len = shape.seq_len;
  o.lora = shape.lora;
  o.dtype = run.dtype;
  o.device = run.device;
  o.threads = run.threads;
  o.seed = run.seed;
  o.activation_checkpointing = activations.checkpointing;
  o.activation_offloading = activations.offload_inputs;
  if (c.has("mfu_peak_tflops")) o.peak_tflops = c.get<double>("mfu_peak_tflops");
  if (trains_preferences(c)) {  // lora_dpo, full_dpo: its step, on batch_size pairs
    o.dpo = dpo_config_from(c);
  }
  return o;
}

}  // namespace

Command add_bench(CLI::App& app) {
  struct Args {
    std::string model = "llama_tiny", dtype = "fp32", device = "cpu";
    std::vector<std::string> overrides;
    int64_t batch_size = 4, seq_len = 256, max_seq_len = 0, steps = 10, lora_rank = 0;
    int threads = 0;
    double peak_tflops = 0;
    bool checkpointing = false;
    bool offloading = false;
    bool dora = false;
    bool dpo = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "bench",
      "Train a model on random tokens for a few steps; the last line printed is a JSON summary. With "
      "HONE_PROFILE=1 the timed steps' ops are listed with their times at exit, with HONE_PROFILE=products "
      "also each matrix product by shape");
  sub->add_option("--model", args->model,
                  "A built-in model (llama_tiny, llama_125M, gpt2_124M, ...), or a training config (built-in or a "
                  "YAML file): its model, batch_size, sequence length, dtype, device, threads, activation "
                  "checkpointing and LoRA adapters are then the defaults of the options below")
      ->capture_default_str();
  sub->add_option("overrides", args->overrides, "With a config: key=value overrides of it, as hone run takes them");
  CLI::Option* batch_size = sub->add_option("--batch-size", args->batch_size, "Sequences per step")
                                ->check(positive_count())
                                ->capture_default_str();
  CLI::Option* seq_len =
      sub->add_option("--seq-len", args->seq_len, "Tokens per sequence")->check(positive_count())->capture_default_str();
  CLI::Option* max_seq_len =
      sub->add_option("--max-seq-len", args->max_seq_len,
                      "The model's longest sequence (default: the preset's); with RoPE or ALiBi any length runs, "
                      "learned positions grow their table")
          ->check(positive_count());
  CLI::Option* dtype = sub->add_option("--dtype", args->dtype, "Compute dtype: fp32 or bf16")
                           ->check(CLI::IsMember({"fp32", "bf16"}))
                           ->capture_default_str();
  sub->add_option("--steps", args->steps, "Timed steps (after one warm-up step)")
      ->check(positive_count())
      ->capture_default_str();
  CLI::Option* threads = sub->add_option("--threads", args->threads, "CPU threads (0: all cores)")
                             ->check(CLI::Range(0, 4096))
                             ->capture_default_str();
  CLI::Option* device = sub->add_option("--device", args->device, "cpu or cuda")->capture_default_str();
  CLI::Option* checkpointing =
      sub->add_flag("--activation-checkpointing", args->checkpointing, "Recompute each layer in the backward pass");
  CLI::Option* offloading = sub->add_flag("--activation-offloading", args->offloading,
                                          "With --activation-checkpointing on a GPU: keep the layer inputs in host memory");
  CLI::Option* lora_rank =
      sub->add_option("--lora-rank", args->lora_rank,
                      "Train LoRA adapters of this rank on a frozen base instead of every weight (0); the modules of "
                      "torchtune's Llama 3.1 8B LoRA recipe: q, v and output projections and the MLP, alpha 2 x rank "
                      "(with a config, in place of its adapters)")
          ->capture_default_str();
  CLI::Option* dora = sub->add_flag("--dora", args->dora,
                                    "The adapters (of --lora-rank or the config) are DoRA's: each adapted row also "
                                    "learns its magnitude");
  CLI::Option* dpo = sub->add_flag("--dpo", args->dpo,
                                   "Time DPO's step (beta 0.1): --batch-size / 2 pairs of sequences, the reference's "
                                   "forward pass (with --lora-rank the adapters off, else a frozen copy of the "
                                   "model), then the trained one");
  CLI::Option* peak = sub->add_option("--peak-tflops", args->peak_tflops,
                  "MFU against this peak, e.g. a GPU's datasheet bf16 figure (PaLM's convention; H100 SXM: 989), "
                  "instead of the GEMM peak measured in the run (a config's mfu_peak_tflops)")
      ->check(positive_number());
  return [=] {
    // A built-in model takes every option's value, defaults included; a config
    // only those given on the command line.
    const bool preset = is_model_preset(args->model);
    const auto given = [&](const CLI::Option* option) { return preset || option->count() > 0; };
    BenchOptions o;
    if (preset) {
      HONE_CHECK(args->overrides.empty(), "key=value overrides ({}) change a config; --model {} is a built-in model",
                 fmt::join(args->overrides, " "), args->model);
      o.model = model_preset(args->model);
    } else {
      std::optional<Config> config = find_config(args->model);
      if (!config) {
        const std::vector<std::string> models = model_preset_names();
        std::vector<std::string> names = models;
        for (const BuiltinConfig& b : builtin_configs()) names.push_back(b.name);
        const std::string suggestion = closest_match(args->model, names);
        fail("--model {}: no built-in model, built-in config or config file has that name{}; the built-in models: "
             "{} (hone ls lists the configs too)",
             args->model, suggestion.empty() ? std::string() : fmt::format(" (did you mean '{}'?)", suggestion),
             fmt::join(models, ", "));
      }
      o = options_from_config(std::move(*config), args->overrides);
    }
    if (max_seq_len->count() > 0) o.model.max_seq_len = args->max_seq_len;
    if (given(batch_size)) o.batch_size = args->batch_size;
    if (given(seq_len)) o.seq_len = args->seq_len;
    HONE_CHECK(o.seq_len <= o.model.max_seq_len, "--seq-len {} is longer than {}", o.seq_len,
               max_seq_len->count() > 0
                   ? fmt::format("--max-seq-len {}", o.model.max_seq_len)
                   : fmt::format("{}'s max_seq_len {}: raise it with --max-seq-len", o.model.name, o.model.max_seq_len));
    if (given(dtype)) o.dtype = parse_dtype(args->dtype);
    HONE_CHECK(o.dtype == DType::f32 || o.dtype == DType::bf16, "{}: dtype {}: hone bench times fp32 or bf16",
               o.config, dtype_name(o.dtype));
    o.steps = args->steps;
    if (peak->count() > 0) o.peak_tflops = args->peak_tflops;
    if (given(threads)) o.threads = args->threads;
    if (given(device)) o.device = parse_device(args->device);
    if (given(checkpointing)) o.activation_checkpointing = args->checkpointing;
    if (given(offloading)) o.activation_offloading = args->offloading;
    HONE_CHECK(!o.activation_offloading || (o.activation_checkpointing && o.device.is_cuda()),
               "--activation-offloading keeps the checkpointed layer inputs in host memory during a GPU run: it needs "
               "--activation-checkpointing and --device cuda");
    HONE_CHECK(args->lora_rank >= 0, "--lora-rank must not be negative, got {}", args->lora_rank);
    if (given(lora_rank)) {
      o.lora.reset();
      if (args->lora_rank > 0) {
        o.lora = LoraConfig{.rank = args->lora_rank, .alpha = 2.0 * double(args->lora_rank),
                            .attn_modules = {"q_proj", "v_proj", "output_proj"}, .apply_to_mlp = true};
      }
    }
    if (dora->count() > 0) {  // a flag: with a preset too, only when given
      HONE_CHECK(o.lora.has_value(), "--dora makes the adapters DoRA's: give --lora-rank (or a LoRA config)");
      o.lora->use_dora = true;
    }
    if (dpo->count() > 0 && !o.dpo) o.dpo = DpoConfig{};
    auto report = run_bench(o, [&](int64_t step, double loss, double seconds) {
      fmt::print(stderr, "{} {:>4}/{}  loss {:.4f}  {:.3f} s\n", step == 0 ? "warm-up" : "step   ", step, o.steps,
                 loss, seconds);
    });
    fmt::print("{}\n", report.dump());
    return 0;
  };
}

}  // namespace hone::cli
