// hone bench --model NAME --batch-size B --seq-len T [--max-seq-len L] --dtype fp32|bf16 --steps N [--threads K]
//            [--device cpu|cuda] [--activation-checkpointing [--activation-offloading]] [--lora-rank R]
//            [--peak-tflops P]
#include <fmt/core.h>

#include "hone/cli/commands.hpp"
#include "hone/core/device.hpp"
#include "hone/train/bench.hpp"

namespace hone::cli {

Command add_bench(CLI::App& app) {
  struct Args {
    std::string model = "llama_tiny", dtype = "fp32", device = "cpu";
    int64_t batch_size = 4, seq_len = 256, max_seq_len = 0, steps = 10, lora_rank = 0;
    int threads = 0;
    double peak_tflops = 0;
    bool checkpointing = false;
    bool offloading = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "bench", "Train a model on random tokens for a few steps; the last line printed is a JSON summary");
  sub->add_option("--model", args->model, "Built-in model name (llama_tiny, llama_125M, gpt2_124M, ...)")
      ->capture_default_str();
  sub->add_option("--batch-size", args->batch_size, "Sequences per step")->capture_default_str();
  sub->add_option("--seq-len", args->seq_len, "Tokens per sequence")->capture_default_str();
  sub->add_option("--max-seq-len", args->max_seq_len,
                  "The model's longest sequence (default: the preset's); with RoPE or ALiBi any length runs, learned "
                  "positions grow their table");
  sub->add_option("--dtype", args->dtype, "Compute dtype: fp32 or bf16")->capture_default_str();
  sub->add_option("--steps", args->steps, "Timed steps (after one warm-up step)")->capture_default_str();
  sub->add_option("--threads", args->threads, "CPU threads (0: all cores)")->capture_default_str();
  sub->add_option("--device", args->device, "cpu or cuda")->capture_default_str();
  sub->add_flag("--activation-checkpointing", args->checkpointing, "Recompute each layer in the backward pass");
  sub->add_flag("--activation-offloading", args->offloading,
                "With --activation-checkpointing on a GPU: keep the layer inputs in host memory");
  sub->add_option("--lora-rank", args->lora_rank,
                  "Train LoRA adapters of this rank on a frozen base instead of every weight (0); the modules of "
                  "torchtune's Llama 3.1 8B LoRA recipe: q, v and output projections and the MLP, alpha 2 x rank")
      ->capture_default_str();
  CLI::Option* peak = sub->add_option("--peak-tflops", args->peak_tflops,
                  "MFU against this peak, e.g. a GPU's datasheet bf16 figure (PaLM's convention; H100 SXM: 989), "
                  "instead of the GEMM peak measured in the run");
  return [args, peak] {
    BenchOptions o;
    o.model = model_preset(args->model);
    if (args->max_seq_len > 0) o.model.max_seq_len = args->max_seq_len;
    HONE_CHECK(args->seq_len <= o.model.max_seq_len,
               "--seq-len {} is longer than {}'s max_seq_len {}: raise it with --max-seq-len", args->seq_len,
               args->model, o.model.max_seq_len);
    o.batch_size = args->batch_size;
    o.seq_len = args->seq_len;
    o.dtype = parse_dtype(args->dtype);
    HONE_CHECK(o.dtype == DType::f32 || o.dtype == DType::bf16, "--dtype must be fp32 or bf16, got '{}'",
               args->dtype);
    o.steps = args->steps;
    if (peak->count() > 0) o.peak_tflops = args->peak_tflops;
    o.threads = args->threads;
    o.device = parse_device(args->device);
    o.activation_checkpointing = args->checkpointing;
    o.activation_offloading = args->offloading;
    HONE_CHECK(!o.activation_offloading || (o.activation_checkpointing && o.device.is_cuda()),
               "--activation-offloading keeps the checkpointed layer inputs in host memory during a GPU run: it needs "
               "--activation-checkpointing and --device cuda");
    HONE_CHECK(args->lora_rank >= 0, "--lora-rank must not be negative, got {}", args->lora_rank);
    if (args->lora_rank > 0) {
      o.lora = LoraConfig{.rank = args->lora_rank, .alpha = 2.0 * double(args->lora_rank),
                          .attn_modules = {"q_proj", "v_proj", "output_proj"}, .apply_to_mlp = true};
    }
    auto report = run_bench(o, [&](int64_t step, double loss, double seconds) {
      fmt::print(stderr, "{} {:>4}/{}  loss {:.4f}  {:.3f} s\n", step == 0 ? "warm-up" : "step   ", step, o.steps,
                 loss, seconds);
    });
    fmt::print("{}\n", report.dump());
    return 0;
  };
}

}  // namespace hone::cli
