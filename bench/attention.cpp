// Attention alone, forward and backward, through ops:: on the CPU or a GPU:
// milliseconds per call (best of --runs) and TFLOP/s, causal, with
// FlashAttention's FLOP convention (forward 4·B·H·T²·D / 2 for the causal half,
// backward 2.5× the forward), so figures compare with its published ones.
//
//   build/bin/bench_attention [--device cpu|cuda] [--dtype bf16|fp32] [--batch 4] [--seq 4096]
//                             [--heads 16] [--kv-heads 16] [--head-dim 128] [--runs 10] [--threads 0]
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "hone/ops/ops.hpp"
#include "device_timing.hpp"

using namespace hone;
using bench::best_seconds;
using bench::random_on;

int main(int argc, char** argv) {
  CLI::App app{"Causal attention forward and backward: time per call and TFLOP/s"};
  int64_t batch = 4, seq = 4096, heads = 16, kv_heads = 16, head_dim = 128;
  bench::TimingOptions timing;
  timing.add_to(app);
  app.add_option("--batch", batch)->capture_default_str();
  app.add_option("--seq", seq)->capture_default_str();
  app.add_option("--heads", heads)->capture_default_str();
  app.add_option("--kv-heads", kv_heads)->capture_default_str();
  app.add_option("--head-dim", head_dim)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    timing.apply();
    const Device device = timing.device;
    const DType dtype = timing.dtype;
    const ops::AttentionHeads shape{.n_heads = heads, .n_kv_heads = kv_heads, .head_dim = head_dim};
    const Shape qkv_shape{batch, seq, (heads + 2 * kv_heads) * head_dim}, out_shape{batch, seq, heads * head_dim};
    const Tensor qkv = random_on(qkv_shape, dtype, device, 1), d_out = random_on(out_shape, dtype, device, 2);
    const Tensor out = Tensor::empty(out_shape, dtype, device), d_qkv = Tensor::empty(qkv_shape, dtype, device);
    const Tensor lse = Tensor::empty({batch, heads, seq}, DType::f32, device);
    const double forward_s =
        best_seconds(device, timing.runs, [&] { ops::attention_forward(qkv, out, lse, Tensor(), shape); });
    const double backward_s = best_seconds(
        device, timing.runs, [&] { ops::attention_backward(d_out, qkv, out, lse, Tensor(), d_qkv, shape); });
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
