// hone comm-bench [--op all_reduce|all_gather|reduce_scatter|all] [--min-bytes B] [--max-bytes B]
//                 [--iters N] [--warmup N] [--dtype f32|bf16|f64] [--device cpu|cuda]
// Collective bandwidth over message sizes, printed as nccl-tests' and rccl-tests' *_perf do:
// size, count, type, redop, time (us, mean per call, the slowest rank's), algbw = size / time,
// busbw = algbw × 2(n-1)/n for all_reduce and × (n-1)/n for all_gather and reduce_scatter
// (what one link carries in a ring, comparable across rank counts). For all_gather the size is
// the gathered buffer, for reduce_scatter the scattered input, as in nccl-tests. Run it under
// hone launch, mpirun or srun; alone it measures a world of one.
#include <fmt/format.h>

#include <chrono>
#include <optional>

#include "hone/cli/commands.hpp"
#include "hone/core/error.hpp"
#include "hone/core/parallel.hpp"
#include "hone/data/preprocess.hpp"
#include "hone/dist/communicator.hpp"
#include "hone/dist/environment.hpp"
#include "hone/ops/ops.hpp"

namespace hone::cli {
namespace {

struct Args {
  std::vector<std::string> ops{"all"};
  std::string min_bytes = "8", max_bytes = "32M";  // sizes as nccl-tests' -b and -e take them
  int iters = 20, warmup = 5;
  std::string dtype = "f32", device = "cpu";
};

std::string_view type_name(DType d) {
  switch (d) {
    case DType::f32: return "float";
    case DType::bf16: return "bfloat16";
    default: return "double";
  }
}

double bus_factor(const std::string& op, int n) {
  return op == "all_reduce" ? 2.0 * (n - 1) / n : double(n - 1) / n;
}

// Mean seconds per call over `iters` calls, the slowest rank's.
double time_op(dist::Communicator& comm, const std::string& op, const Tensor& in, const Tensor& out, int warmup,
               int iters) {
  auto call = [&] {
    if (op == "all_reduce") comm.all_reduce(in);
    else if (op == "all_gather") comm.all_gather(in, out);
    else comm.reduce_scatter(in, out);
  };
  for (int i = 0; i < warmup; ++i) call();
  comm.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) call();
  const double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
  // On the operands' device: NCCL moves CUDA tensors only.
  Tensor one = Tensor::from(std::vector<double>{mine}, Shape{1}).to(in.device());
  Tensor all = Tensor::empty(Shape{comm.size()}, DType::f64, in.device());
  comm.all_gather(one, all);
  double slowest = 0;
  for (double t : all.to_vector<double>()) slowest = std::max(slowest, t);
  return slowest;
}

int run(const Args& a) {
  std::optional<DType> parsed;
  try {
    parsed = parse_dtype(a.dtype);
  } catch (const Error&) {  // its list names dtypes the collectives do not take
  }
  HONE_CHECK(parsed == DType::f32 || parsed == DType::bf16 || parsed == DType::f64,
             "--dtype must be f32, bf16 or f64, got '{}'", a.dtype);
  const DType dtype = *parsed;
  const auto min_bytes = int64_t(data::parse_size(a.min_bytes, "--min-bytes"));
  const auto max_bytes = int64_t(data::parse_size(a.max_bytes, "--max-bytes"));
  HONE_CHECK(min_bytes >= 1 && max_bytes >= min_bytes, "--min-bytes {} and --max-bytes {} must satisfy 1 <= min <= max",
             min_bytes, max_bytes);
  HONE_CHECK(a.iters >= 1 && a.warmup >= 0, "--iters must be at least 1 and --warmup not negative");
  std::vector<std::string> ops;
  for (const std::string& op : a.ops) {
    if (op == "all") ops.insert(ops.end(), {"all_reduce", "all_gather", "reduce_scatter"});
    else if (op == "all_reduce" || op == "all_gather" || op == "reduce_scatter") ops.push_back(op);
    else fail("--op '{}' is not all_reduce, all_gather, reduce_scatter or all", op);
  }
  // Nothing here computes: idle OpenMP threads spinning on the cores would only slow MPI's progress.
  set_num_threads(1);
  const Device device = dist::rank_device(dist::discover_process(), parse_device(a.device));
  ops::use_device(device);
  Tensor::zeros(Shape{1}, dtype, device);  // a device that cannot run fails here, before the header
  auto comm = dist::Communicator::from_environment(device);
  const int n = comm->size();
  const bool root = comm->rank() == 0;
  const size_t elt = dtype_size(dtype);
  if (root) {
    fmt::print("# hone comm-bench: {} ranks, backend {}, device {}, {} iterations after {} warm-up\n#\n", n,
               comm->backend(), device.str(), a.iters, a.warmup);
  }
  for (const std::string& op : ops) {
    if (root) {
      fmt::print("# {}\n", op);
      fmt::print("# {:>12} {:>12} {:>9} {:>6} {:>10} {:>8} {:>8}\n", "size", "count", "type", "redop", "time",
                 "algbw", "busbw");
      fmt::print("# {:>12} {:>12} {:>9} {:>6} {:>10} {:>8} {:>8}\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)",
                 "(GB/s)");
    }
    double bus_sum = 0;
    int rows = 0;
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
      // Per-rank chunks of whole elements; a size too small for one element per rank is skipped.
      const int64_t chunk = op == "all_reduce" ? bytes / int64_t(elt) : bytes / int64_t(elt) / n;
      if (chunk == 0) continue;
      const int64_t count = op == "all_reduce" ? chunk : chunk * n;
      Tensor big = Tensor::zeros(Shape{count}, dtype, device);
      Tensor small = op == "all_reduce" ? big : Tensor::zeros(Shape{chunk}, dtype, device);
      const Tensor& in = op == "reduce_scatter" ? big : small;
      const Tensor& out = op == "reduce_scatter" ? small : big;
      const double seconds = time_op(*comm, op, in, out, a.warmup, a.iters);
      const double size = double(count) * double(elt);
      const double algbw = size / seconds / 1e9, busbw = algbw * bus_factor(op, n);
      bus_sum += busbw;
      ++rows;
      if (root) {
        fmt::print("  {:>12} {:>12} {:>9} {:>6} {:>10.2f} {:>8.2f} {:>8.2f}\n", int64_t(size), count,
                   type_name(dtype), op == "all_gather" ? "none" : "sum", seconds * 1e6, algbw, busbw);
      }
    }
    if (root) fmt::print("# Avg bus bandwidth    : {:.4f}\n#\n", rows > 0 ? bus_sum / rows : 0.0);
  }
  return 0;
}

}  // namespace

Command add_comm_bench(CLI::App& app) {
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "comm-bench", "Bandwidth of all_reduce, all_gather and reduce_scatter over message sizes, like nccl-tests; run "
                    "it under hone launch, mpirun or srun");
  sub->add_option("--op", a->ops, "all_reduce, all_gather, reduce_scatter or all")->capture_default_str();
  sub->add_option("--min-bytes,-b", a->min_bytes, "Smallest message: bytes, or 64K, 1M, 1G (powers of 1024)")
      ->capture_default_str();
  sub->add_option("--max-bytes,-e", a->max_bytes, "Largest message (sizes double from the smallest)")
      ->capture_default_str();
  sub->add_option("--iters", a->iters, "Timed calls per size")->capture_default_str();
  sub->add_option("--warmup", a->warmup, "Untimed calls per size first")->capture_default_str();
  sub->add_option("--dtype", a->dtype, "f32, bf16 or f64")->capture_default_str();
  sub->add_option("--device", a->device, "cpu (MPI) or cuda (NCCL)")->capture_default_str();
  return [a] { return run(*a); };
}

}  // namespace hone::cli
