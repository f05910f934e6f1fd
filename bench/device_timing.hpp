#pragma once
// Shared by the benchmarks that time ops on the CPU or a GPU: random inputs on
// a device, and the best wall time of a few calls with the device synchronized.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "hone/core/parallel.hpp"
#include "hone/core/rng.hpp"
#include "hone/ops/ops.hpp"

namespace hone::bench {

// The options every such benchmark takes: --device, --dtype, --runs, --threads.
struct TimingOptions {
  std::string device_name = "cpu", dtype_name = "bf16";
  int runs = 10, threads = 0;
  Device device;
  DType dtype = DType::bf16;

  void add_to(CLI::App& app) {
    app.add_option("--device", device_name, "cpu or cuda")->capture_default_str();
    app.add_option("--dtype", dtype_name, "bf16 or fp32")->capture_default_str();
    app.add_option("--runs", runs, "Timed calls; the best is reported")->capture_default_str();
    app.add_option("--threads", threads, "CPU threads (0: all cores)")->capture_default_str();
  }
  // After parsing: the thread count set, device and dtype read (hone::Error if unknown).
  void apply() {
    if (threads > 0) set_num_threads(threads);
    device = parse_device(device_name);
    dtype = parse_dtype(dtype_name);
  }
};

// Normal(0, stddev) values of `dtype` on `device`.
inline Tensor random_on(const Shape& shape, DType dtype, Device device, uint64_t seed, double stddev = 1.0) {
  std::vector<float> values(size_t(shape.numel()));
  Generator(seed).normal(std::span<float>(values), 0.0, stddev);
  return ops::cast_to(Tensor::from(values, shape), dtype).to(device);
}

// Best wall time of `runs` calls of f() after one untimed call, in seconds.
template <typename F>
double best_seconds(Device device, int runs, F&& f) {
  f();
  ops::synchronize(device);
  double best = 1e30;
  for (int run = 0; run < runs; ++run) {
    const auto start = std::chrono::steady_clock::now();
    f();
    ops::synchronize(device);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace hone::bench
