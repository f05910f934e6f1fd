// The linear layers of a model preset's training step, each product alone,
// through ops:: on the CPU or a GPU: milliseconds per call (best of --runs) and
// TFLOP/s for the forward product, the input gradient and the weight gradient
// of the qkv, output, MLP up and down projections and the output head; the head
// with its rows of logits packed and padded to 16 bytes (ops::padded_row_length,
// as the Transformer lays them out on a GPU). It says which products hold a step
// back: GPT-2 124M's head on an H200 ran at about 80 TFLOP/s with packed rows.
// For models with biases or a GELU MLP (GPT-2), a second table times what the
// layers fuse into their products and their bias gradients alone.
//
//   build/bin/bench_linear [--model gpt2_124M] [--device cpu|cuda] [--dtype bf16|fp32] [--rows 8192] [--runs 10]
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <vector>

#include "hone/model/activations.hpp"
#include "hone/model/config.hpp"
#include "hone/ops/ops.hpp"
#include "device_timing.hpp"

namespace {

using namespace hone;
using bench::best_seconds;
using bench::random_on;

struct Projection {
  std::string name;
  int64_t in, out;
  int64_t per_step;  // calls in a step: the layers', or 1 for the head
  bool head = false, padded_rows = false;
};

// "milliseconds (TFLOP/s)" of one call of a projection's product over `rows` rows.
std::string product_cell(const Projection& p, int64_t rows, double seconds) {
  const double flops = 2.0 * double(rows) * double(p.in) * double(p.out);
  return fmt::format("{:.3f} ({:.3g})", 1e3 * seconds, flops / seconds / 1e12);
}

// A layer's projections, each `per_step` (the layer count) times a step.
std::vector<Projection> layer_projections(const ModelConfig& c) {
  return {
      {"qkv", c.dim, c.qkv_dim(), c.n_layers},
      {"attention output", c.n_heads * c.head_dim(), c.dim, c.n_layers},
      {"mlp up", c.dim, c.mlp_up_dim(), c.n_layers},
      {"mlp down", c.ffn_dim, c.dim, c.n_layers},
  };
}

// The layers' products as the model runs them where it fuses more into them:
// the forward with its bias (and the MLP up projection's GELU: cuBLASLt's
// epilogues on a GPU), the MLP down projection's input gradient through GELU's
// derivative, and each bias gradient (a column sum of dy) alone. Compared with
// the plain products above, the difference is what the fusions cost or save.
void print_epilogues(const ModelConfig& c, int64_t rows, const bench::TimingOptions& timing) {
  const Device device = timing.device;
  const DType dtype = timing.dtype;
  const auto gelu = c.mlp == MlpKind::gelu_tanh ? ops::GeluApproximation::tanh : ops::GeluApproximation::none;
  const bool gelu_mlp = c.mlp != MlpKind::swiglu;
  fmt::print("\nthe layers' fused products; ms per call (TFLOP/s of the product)\n");
  fmt::print("{:<18} {:>25} {:>26} {:>18}\n", "product", c.linear_bias ? "forward + bias" : "forward",
             gelu_mlp ? "input gradient" : "", c.linear_bias ? "bias gradient" : "");
  for (const Projection& p : layer_projections(c)) {
    const bool up = p.name == "mlp up", down = p.name == "mlp down";
    const Tensor x = random_on({rows, p.in}, dtype, device, 1), weight = random_on({p.out, p.in}, dtype, device, 2);
    const Tensor bias = c.linear_bias ? random_on({p.out}, DType::f32, device, 4) : Tensor();
    const Tensor y = random_on({rows, p.out}, dtype, device, 3), pre = Tensor::empty({rows, p.out}, dtype, device);
    const auto cell = [&](double s) { return product_cell(p, rows, s); };
    std::string forward, input, bias_gradient;
    if (c.linear_bias || (up && gelu_mlp)) {
      forward = cell(best_seconds(device, timing.runs, [&] {
        if (up && gelu_mlp) ops::linear_gelu_forward(x, weight, bias, pre, y, gelu);
        else ops::linear_forward(x, weight, bias, y);
      }));
      if (up && gelu_mlp) forward += " +gelu";
    }
    if (down && gelu_mlp) {
      // dx is the up projection's pre-activation gradient, through GELU at `pre`.
      const Tensor pre_up = random_on({rows, p.in}, dtype, device, 5), d_pre = Tensor::empty({rows, p.in}, dtype, device);
      input = cell(best_seconds(device, timing.runs,
                                [&] { ops::linear_gelu_input_backward(y, weight, pre_up, d_pre, gelu); })) +
              " +dgelu";
    }
    if (c.linear_bias) {
      const Tensor d_bias = Tensor::zeros({p.out}, DType::f32, device);
      const double s = best_seconds(device, timing.runs, [&] {
        ops::linear_backward(y, x, weight, Tensor(), Tensor(), d_bias, false, /*accumulate_dw=*/true);
      });
      const double gb = double(rows) * double(p.out) * double(dtype_size(dtype)) / 1e9;
      bias_gradient = fmt::format("{:.3f} ({:.0f} GB/s)", 1e3 * s, gb / s);
    }
    fmt::print("{:<18} {:>25} {:>26} {:>18}\n", p.name, forward, input, bias_gradient);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A model's linear layers, each product alone: time per call and TFLOP/s"};
  std::string model = "gpt2_124M";
  int64_t rows = 8192;
  bench::TimingOptions timing;
  app.add_option("--model", model, "A model preset (hone configs names them)")->capture_default_str();
  app.add_option("--rows", rows, "Tokens in a step (batch x seq)")->capture_default_str();
  timing.add_to(app);
  CLI11_PARSE(app, argc, argv);
  try {
    timing.apply();
    const Device device = timing.device;
    const DType dtype = timing.dtype;
    const int runs = timing.runs;
    const ModelConfig c = model_preset(model);
    const int64_t layers = c.n_layers;
    std::vector<Projection> projections = layer_projections(c);
    projections.push_back({"head, packed rows", c.dim, c.vocab_size, 1, /*head=*/true});
    projections.push_back({"head, padded rows", c.dim, c.vocab_size, 1, /*head=*/true, /*padded_rows=*/true});
    const int64_t padded_vocab = ops::padded_row_length(c.vocab_size, dtype);
    const bool paddable = padded_vocab != c.vocab_size, head_padded = paddable && pads_logit_rows(device);
    fmt::print("{} on {} in {}, {} rows; ms per call (TFLOP/s)\n", model, device.str(), dtype_name(dtype), rows);
    fmt::print("{:<18} {:>6} {:>7} {:>19} {:>19} {:>19}\n", "product", "in", "out", "forward", "input gradient",
               "weight gradient");
    double step_s = 0;
    for (const Projection& p : projections) {
      if (p.padded_rows && !paddable) continue;
      const int64_t row_length = p.padded_rows ? padded_vocab : p.out;
      const Tensor x = random_on({rows, p.in}, dtype, device, 1), weight = random_on({p.out, p.in}, dtype, device, 2);
      const Tensor y = random_on({rows, row_length}, dtype, device, 3), dx = Tensor::empty({rows, p.in}, dtype, device);
      const Tensor d_weight = Tensor::zeros({p.out, p.in}, DType::f32, device);
      const double forward = best_seconds(device, runs, [&] { ops::linear_forward(x, weight, Tensor(), y); });
      const double input = best_seconds(device, runs, [&] {
        ops::linear_backward(y, x, weight, dx, Tensor(), Tensor(), /*accumulate_dx=*/false);
      });
      const double weights = best_seconds(device, runs, [&] {
        ops::linear_backward(y, x, weight, Tensor(), d_weight, Tensor(), false, /*accumulate_dw=*/true);
      });
      const auto cell = [&](double s) { return product_cell(p, rows, s); };
      fmt::print("{:<18} {:>6} {:>7} {:>19} {:>19} {:>19}\n", p.name, p.in, p.out, cell(forward), cell(input),
                 cell(weights));
      if (!p.head || p.padded_rows == head_padded) step_s += double(p.per_step) * (forward + input + weights);
    }
    fmt::print("a step's linear products ({} layers, the head's rows laid out as on a {}): {:.2f} ms\n", layers,
               device.str(), 1e3 * step_s);
    if (c.linear_bias || c.mlp != MlpKind::swiglu) print_epilogues(c, rows, timing);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_linear: error: {}\n", e.what());
    return 2;
  }
  return 0;
}
