// Attention alone, forward and backward, through ops:: on the CPU or a GPU:
// milliseconds per call (best of --runs) and TFLOP/s, causal, with
// FlashAttention's FLOP convention (forward 4·B·H·T²·D / 2 for the causal half,
// backward 2.5× the forward), so figures compare with its published ones.
//
//   build/bin/bench_attention [--device cpu|cuda] [--dtype bf16|fp32] [--batch 4] [--seq 4096]
//                             [--heads 16] [--kv-heads 16] [--head-dim 128] [--runs 10] [--threads 0]
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "hone/core/parallel.hpp"
#include "hone/core/rng.hpp"
#include "hone/ops/ops.hpp"

namespace {

using namespace hone;

Tensor random_on(const Shape& shape, DType dtype, Device device, uint64_t seed) {
  std::vector<float> values(size_t(shape.numel()));
  Generator(seed).normal(std::span<float>(values), 0.0, 1.0);
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Causal attention forward and backward: time per call and TFLOP/s"};
  std::string device_name = "cpu", dtype_name_arg = "bf16";
  int64_t batch = 4, seq = 4096, heads = 16, kv_heads = 16, head_dim = 128;
  int runs = 10, threads = 0;
  app.add_option("--device", device_name, "cpu or cuda")->capture_default_str();
  app.add_option("--dtype", dtype_name_arg, "bf16 or fp32")->capture_default_str();
  app.add_option("--batch", batch)->capture_default_str();
  app.add_option("--seq", seq)->capture_default_str();
  app.add_option("--heads", heads)->capture_default_str();
  app.add_option("--kv-heads", kv_heads)->capture_default_str();
  app.add_option("--head-dim", head_dim)->capture_default_str();
  app.add_option("--runs", runs, "Timed calls; the best is reported")->capture_default_str();
  app.add_option("--threads", threads, "CPU threads (0: all cores)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    if (threads > 0) set_num_threads(threads);
    const Device device = parse_device(device_name);
    const DType dtype = parse_dtype(dtype_name_arg);
    const ops::AttentionHeads shape{.n_heads = heads, .n_kv_heads = kv_heads, .head_dim = head_dim};
    const Shape qkv_shape{batch, seq, (heads + 2 * kv_heads) * head_dim}, out_shape{batch, seq, heads * head_dim};
    const Tensor qkv = random_on(qkv_shape, dtype, device, 1), d_out = random_on(out_shape, dtype, device, 2);
    const Tensor out = Tensor::empty(out_shape, dtype, device), d_qkv = Tensor::empty(qkv_shape, dtype, device);
    const Tensor lse = Tensor::empty({batch, heads, seq}, DType::f32, device);
    const double forward_s =
        best_seconds(device, runs, [&] { ops::attention_forward(qkv, out, lse, Tensor(), shape); });
    const double backward_s = best_seconds(
        device, runs, [&] { ops::attention_backward(d_out, qkv, out, lse, Tensor(), d_qkv, shape); });
    const double forward_flops = 4.0 * double(batch * heads * head_dim) * double(seq) * double(seq) / 2.0;
    fmt::print("{} {} batch {} seq {} heads {}/{} head_dim {}: forward {:.3f} ms ({:.3g} TFLOP/s), "
               "backward {:.3f} ms ({:.3g} TFLOP/s)\n",
               device.str(), dtype_name(dtype), batch, seq, heads, kv_heads, head_dim, 1e3 * forward_s,
               forward_flops / forward_s / 1e12, 1e3 * backward_s, 2.5 * forward_flops / backward_s / 1e12);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_attention: error: {}\n", e.what());
    return 2;
  }
  return 0;
}
