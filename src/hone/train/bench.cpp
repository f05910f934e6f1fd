#include "hone/train/bench.hpp"

#include <algorithm>
#include <chrono>

#include "hone/core/parallel.hpp"
#include "hone/core/profiler.hpp"
#include "hone/core/rng.hpp"
#include "hone/kernels/cpu/gemm.hpp"
#include "hone/model/transformer.hpp"
#include "hone/ops/ops.hpp"
#include "hone/optim/adamw.hpp"
#include "hone/train/run_config.hpp"
#include "hone/train/objective.hpp"

namespace hone {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace

double measure_gemm_peak_tflops(DType dtype, Device device, double window_seconds) {
  const UnprofiledScope not_a_training_op;
  // Large enough to reach the GEMM library's steady state: on a GPU a size that
  // takes milliseconds, on a 2-core CPU one that takes well under a second in fp32.
  const int64_t n = device.is_cuda() ? 8192 : dtype == DType::bf16 ? 2048 : 1536;
  // Random operands: a GPU multiplies zeros faster (less switching power, higher clocks).
  auto random_matrix = [&](uint64_t stream) {
    std::vector<float> values(static_cast<size_t>(n * n));
    Generator(1234, random_stream(RandomUse::benchmark, stream)).uniform(std::span<float>(values), -1.0, 1.0);
    Tensor t = Tensor::empty({1, n, n}, dtype);
    ops::cast(Tensor::from(values, {1, n, n}), t);
    return t.to(device);
  };
  const Tensor a = random_matrix(1), b = random_matrix(2);
  const Tensor c = Tensor::zeros({1, n, n}, dtype, device);
  ops::matmul(a, false, b, true, c);  // warm-up: creates the primitive
  double best = 1e30;
  const auto window = std::chrono::steady_clock::now();
  for (int run = 0; run < 3 || seconds_since(window) < window_seconds; ++run) {
    ops::synchronize(device);
    auto start = std::chrono::steady_clock::now();
    ops::matmul(a, false, b, true, c);
    ops::synchronize(device);  // a GPU runs it asynchronously
    best = std::min(best, seconds_since(start));
  }
  return 2.0 * double(n) * double(n) * double(n) / best / 1e12;
}

nlohmann::ordered_json run_bench(const BenchOptions& o,
                                 const std::function<void(int64_t step, double loss, double seconds)>& progress) {
  HONE_CHECK(o.steps >= 1, "--steps must be at least 1, got {}", o.steps);
  HONE_CHECK(o.batch_size >= 1, "--batch-size must be at least 1, got {}", o.batch_size);
  HONE_CHECK(!o.peak_tflops || *o.peak_tflops > 0, "--peak-tflops must be positive, got {}", o.peak_tflops.value_or(0));
  HONE_CHECK(!o.dpo || o.batch_size % 2 == 0, "DPO trains on pairs of rows: an even batch size, got {} rows",
             o.batch_size);
  if (o.threads > 0) set_num_threads(o.threads);
  ops::use_device(o.device);
  // Half a second of products, before the steps and again after them, the
  // better of the two: on a shared host a burst of other work can slow every
  // product for longer than that (the best of three in 0.1 s once read half
  // the peak, MFU 174%; half a second before the steps, 63%: MFU 124%).
  double peak = measure_gemm_peak_tflops(o.dtype, o.device, 0.5);

  Transformer model(o.model, o.dtype, o.device, o.lora);
  model.init_weights(o.seed);
  AdamW optimizer(model.trainable_params(), AdamWConfig{});
  // Full-weight DPO's reference: a frozen copy of the model, as full_dpo runs it.
  const bool reference_copy = o.dpo && !o.lora && o.dpo->uses_reference();
  std::unique_ptr<Transformer> reference;
  if (reference_copy) {
    reference = make_reference_model(o.model, o.dtype, o.device);
    for (Parameter& p : reference->params().all()) p.value.copy_from(model.params().get(p.name).compute);
  }
  const std::unique_ptr<Objective> objective =
      o.dpo ? dpo_objective(*o.dpo, reference.get()) : language_model_objective();
  // The peak of training, what the estimate plans: the weights' random draws
  // (the largest parameter in fp32, for a moment) are not part of it.
  allocator_for(o.device).reset_peak();
  model.set_activation_checkpointing(o.activation_checkpointing);
  model.set_activation_offloading(o.activation_offloading);
  model.reserve(o.batch_size, o.seq_len);
  if (reference) reference->reserve(o.batch_size, o.seq_len);

  // Random tokens: the next-token targets are the inputs shifted by one.
  std::vector<double> uniform(size_t(o.batch_size * (o.seq_len + 1)));
  Generator(o.seed, random_stream(RandomUse::benchmark, 1 << 20))
      .uniform(std::span<double>(uniform), 0.0, double(o.model.vocab_size));
  std::vector<int32_t> tokens, targets;
  for (int64_t b = 0; b < o.batch_size; ++b) {
    for (int64_t t = 0; t < o.seq_len; ++t) {
      tokens.push_back(int32_t(uniform[size_t(b * (o.seq_len + 1) + t)]));
      targets.push_back(int32_t(uniform[size_t(b * (o.seq_len + 1) + t + 1)]));
    }
  }
  const Shape shape{o.batch_size, o.seq_len};
  const Batch batch{Tensor::from(tokens, shape).to(o.device), Tensor::from(targets, shape).to(o.device)};

  std::vector<double> times;
  double first_loss = 0, last_loss = 0;
  for (int64_t step = 0; step <= o.steps; ++step) {  // step 0 warms up, untimed
    auto start = std::chrono::steady_clock::now();
    StepStats s = objective->step(model, optimizer, std::span(&batch, 1), 1e-4, 1.0, nullptr);
    ops::synchronize(o.device);  // the optimizer's kernels may still be running on a GPU
    const double elapsed = seconds_since(start);
    if (step == 0) {
      first_loss = s.loss;
      reset_profile();  // HONE_PROFILE reports the timed steps
    } else {
      times.push_back(elapsed);
    }
    last_loss = s.loss;
    if (progress) progress(step, s.loss, elapsed);
  }

  flush_profile();  // the timed steps' device marks read now, not at exit
  const size_t peak_memory = allocator_for(o.device).stats().peak_allocated;  // before the GEMM's operands
  peak = std::max(peak, measure_gemm_peak_tflops(o.dtype, o.device, 0.5));
  const double step_time = median(times);
  const double tokens_per_step = double(o.batch_size * o.seq_len);
  const double flops_per_token = objective->flops_per_token(o.model, o.lora, o.seq_len);
  const double tflops = flops_per_token * tokens_per_step / step_time / 1e12;
  nlohmann::ordered_json out;
  out["model"] = o.model.name;
  out["config"] = o.config.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(o.config);
  out["dtype"] = std::string(dtype_name(o.dtype));
  out["device"] = o.device.str();
  out["batch_size"] = o.batch_size;
  out["seq_len"] = o.seq_len;
  out["steps"] = o.steps;
  out["threads"] = num_threads();
  out["params"] = o.model.num_params();
  out["trained_params"] = model.trainable_params().numel();
  out["lora_rank"] = o.lora ? o.lora->rank : 0;
  out["dora"] = o.lora && o.lora->use_dora;
  out["dpo"] = o.dpo.has_value();
  out["tokens_per_sec"] = tokens_per_step / step_time;
  out["step_time_s"] = step_time;
  out["tflops"] = tflops;
  out["mfu"] = tflops / o.peak_tflops.value_or(peak);
  out["mfu_peak_tflops"] = o.peak_tflops.value_or(peak);
  out["gemm_peak_tflops"] = peak;
  // How the CPU ran its bf16 products (kernels/cpu/gemm.hpp); null where none ran.
  out["bf16_products"] = o.dtype == DType::bf16 && o.device.is_cpu()
                             ? nlohmann::ordered_json(kernels::cpu::bf16_products_name(kernels::cpu::bf16_products()))
                             : nlohmann::ordered_json();
  out["flops_per_token"] = flops_per_token;
  out["peak_memory_bytes"] = peak_memory;
  out["activation_bytes"] = model.activation_bytes();
  // What hone validate would have said before the run.
  MemoryEstimate estimate =
      estimate_training_memory(o.model, o.dtype, o.batch_size, o.seq_len,
                               {.checkpointing = o.activation_checkpointing, .offload_inputs = o.activation_offloading},
                               o.lora, 0, 1, o.device);
  if (reference_copy) estimate.reference = reference_model_bytes(o.model, o.dtype, o.batch_size, o.seq_len, o.device);
  out["memory_estimate_bytes"] = estimate.total();
  out["activation_checkpointing"] = o.activation_checkpointing;
  out["activation_offloading"] = o.activation_offloading;
  out["loss_first"] = first_loss;
  out["loss_last"] = last_loss;
  return out;
}

}  // namespace hone
