#pragma once
// `hone bench`: trains a model for a few steps on random tokens and reports
// throughput, achieved FLOP/s, MFU against this machine's measured GEMM peak
// (or a given one),
// and peak memory, as one JSON object (interface in docs/architecture.md).
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "hone/core/tensor.hpp"
#include "hone/model/config.hpp"
#include "hone/model/lora.hpp"
#include "hone/train/dpo.hpp"

namespace hone {

struct BenchOptions {
  std::string config;  // the training config the settings below came from, if any (the report names it)
  ModelConfig model;
  int64_t batch_size = 4;
  int64_t seq_len = 256;
  DType dtype = DType::f32;
  int64_t steps = 10;  // timed steps, after one untimed warm-up step
  int threads = 0;     // 0 = OpenMP's default
  Device device = Device::cpu();
  uint64_t seed = 1234;
  bool activation_checkpointing = false;
  bool activation_offloading = false;  // with checkpointing: layer inputs in host memory
  std::optional<LoraConfig> lora;  // LoRA adapters on a frozen base instead of training every weight
  // DPO's step (with lora) on batch_size / 2 pairs of rows instead of the language model's.
  std::optional<DpoConfig> dpo;
  // MFU against this peak (a GPU's datasheet figure, PaLM's convention) instead
  // of the GEMM peak measured in the run.
  std::optional<double> peak_tflops;
};

// Peak TFLOP/s of a large square GEMM in `dtype` on `device`: the best of the
// products run in `window_seconds`, at least 3. A training run's MFU metric
// takes the default; `hone bench`, whose MFU is a reported figure, a longer window.
double measure_gemm_peak_tflops(DType dtype, Device device, double window_seconds = 0);

// Runs the benchmark; `progress` (may be null) is told each step's loss and time.
nlohmann::ordered_json run_bench(const BenchOptions& options,
                                 const std::function<void(int64_t step, double loss, double seconds)>& progress);

}  // namespace hone
