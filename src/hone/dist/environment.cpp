#include "hone/dist/environment.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>

#include "hone/core/error.hpp"

namespace hone::dist {

namespace {

// The variable as an integer; `fallback` when unset. Malformed values are errors.
int64_t integer(const EnvLookup& env, const char* name, int64_t fallback) {
  const char* value = env(name);
  if (value == nullptr) return fallback;
  const std::string_view s(value);
  int64_t out = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  HONE_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty(),
             "environment variable {}='{}' is not an integer", name, s);
  return out;
}

const char* first_set(const EnvLookup& env, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (env(n) != nullptr) return n;
  }
  return nullptr;
}

// SLURM_STEP_TASKS_PER_NODE (`variable`) has the form "2(x3),1": 2 tasks on each of 3 nodes, then 1.
int tasks_on_node(const char* variable, std::string_view spec, int64_t node) {
  const auto malformed = [&] {
    return fmt::format("environment variable {}='{}' is malformed (Slurm writes tasks per node as 2(x3),1)", variable,
                       spec);
  };
  const auto whole_number = [&](std::string_view digits) {
    int n = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    HONE_CHECK(ec == std::errc() && end == digits.data() + digits.size() && !digits.empty() && n >= 1, "{}",
               malformed());
    return n;
  };
  int on_node = 0;  // read to the end, so that a malformed item after the node's is an error too
  for (size_t pos = 0; pos < spec.size();) {
    size_t end = spec.find(',', pos);
    if (end == std::string_view::npos) end = spec.size();
    const std::string_view item = spec.substr(pos, end - pos);
    const size_t open = item.find("(x");
    const int tasks = whole_number(item.substr(0, open));
    int repeat = 1;
    if (open != std::string_view::npos) {
      HONE_CHECK(item.back() == ')', "{}", malformed());
      repeat = whole_number(item.substr(open + 2, item.size() - open - 3));
    }
    if (node >= 0 && node < repeat) on_node = tasks;
    node -= repeat;
    pos = end + 1;
  }
  HONE_CHECK(on_node > 0, "environment variable {}='{}' lists fewer nodes than SLURM_NODEID", variable, spec);
  return on_node;
}

void check_consistent(const ProcessInfo& p, const char* source) {
  HONE_CHECK(p.world_size >= 1, "{}: world size {} must be at least 1", source, p.world_size);
  HONE_CHECK(p.rank >= 0 && p.rank < p.world_size, "{}: rank {} is outside the world of {}", source, p.rank,
             p.world_size);
  HONE_CHECK(p.local_world_size >= 1 && p.local_rank >= 0 && p.local_rank < p.local_world_size,
             "{}: local rank {} is outside the {} local processes", source, p.local_rank, p.local_world_size);
  HONE_CHECK(p.master_port >= 0 && p.master_port < 65536, "{}: MASTER_PORT {} is not a port", source,
             p.master_port);
}

// Cartesian expansion of one host name with bracket groups, up to `limit` names in `out`.
void expand_name(std::string_view name, std::string prefix, std::vector<std::string>& out, size_t limit) {
  const size_t open = name.find('[');
  if (open == std::string_view::npos) {
    if (out.size() < limit) out.push_back(prefix + std::string(name));
    return;
  }
  const size_t close = name.find(']', open);
  HONE_CHECK(close != std::string_view::npos, "Slurm node list: '[' without ']' in '{}'", name);
  prefix += name.substr(0, open);
  const std::string_view ranges = name.substr(open + 1, close - open - 1);
  const std::string_view rest = name.substr(close + 1);
  size_t pos = 0;
  while (pos <= ranges.size()) {
    size_t end = ranges.find(',', pos);
    if (end == std::string_view::npos) end = ranges.size();
    const std::string_view range = ranges.substr(pos, end - pos);
    const size_t dash = range.find('-');
    const std::string_view lo = range.substr(0, dash);
    const std::string_view hi = dash == std::string_view::npos ? lo : range.substr(dash + 1);
    int64_t a = 0, b = 0;
    const auto ra = std::from_chars(lo.data(), lo.data() + lo.size(), a);
    const auto rb = std::from_chars(hi.data(), hi.data() + hi.size(), b);
    HONE_CHECK(!lo.empty() && !hi.empty() && ra.ec == std::errc() && ra.ptr == lo.data() + lo.size() &&
                   rb.ec == std::errc() && rb.ptr == hi.data() + hi.size() && a <= b,
               "Slurm node list: '{}' in '{}' is not a number or a range lo-hi", range, name);
    for (int64_t i = a; i <= b && out.size() < limit; ++i) {
      std::string digits = std::to_string(i);
      if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
      expand_name(rest, prefix + digits, out, limit);
    }
    pos = end + 1;
  }
}

}  // namespace

std::vector<std::string> expand_slurm_nodelist(std::string_view list, size_t limit) {
  std::vector<std::string> out;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i < list.size() && list[i] == '[') ++depth;
    if (i < list.size() && list[i] == ']') --depth;
    HONE_CHECK(depth >= 0 && depth <= 1, "Slurm node list '{}' has unbalanced brackets", list);
    if (i == list.size() || (list[i] == ',' && depth == 0)) {
      HONE_CHECK(i > start, "Slurm node list '{}' has an empty name", list);
      expand_name(list.substr(start, i - start), "", out, limit);
      start = i + 1;
    }
  }
  HONE_CHECK(depth == 0, "Slurm node list '{}' has unbalanced brackets", list);
  return out;
}

ProcessInfo discover_process(const EnvLookup& env) {
  ProcessInfo p;
  const auto master = [&] {
    if (const char* addr = env("MASTER_ADDR")) p.master_addr = addr;
    p.master_port = int(integer(env, "MASTER_PORT", 0));
  };
  if (env("RANK") != nullptr || env("WORLD_SIZE") != nullptr) {
    HONE_CHECK(env("RANK") != nullptr && env("WORLD_SIZE") != nullptr,
               "torchrun-style environment: RANK and WORLD_SIZE must be set together");
    p.launcher = "torchrun";
    p.rank = int(integer(env, "RANK", 0));
    p.world_size = int(integer(env, "WORLD_SIZE", 1));
    p.local_rank = int(integer(env, "LOCAL_RANK", p.rank));
    p.local_world_size = int(integer(env, "LOCAL_WORLD_SIZE", p.world_size));
    master();
    check_consistent(p, "RANK/WORLD_SIZE/LOCAL_RANK");
    return p;
  }
  if (env("OMPI_COMM_WORLD_RANK") != nullptr) {
    p.launcher = "openmpi";
    p.rank = int(integer(env, "OMPI_COMM_WORLD_RANK", 0));
    p.world_size = int(integer(env, "OMPI_COMM_WORLD_SIZE", 1));
    p.local_rank = int(integer(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0));
    p.local_world_size = int(integer(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1));
    master();
    check_consistent(p, "OMPI_COMM_WORLD_*");
    return p;
  }
  // Slurm sets SLURM_PROCID in the batch script too (as 0 of SLURM_NTASKS): only
  // a task that srun started (SLURM_STEP_ID set, not the batch step) is a rank.
  if (env("SLURM_PROCID") != nullptr && env("SLURM_STEP_ID") != nullptr &&
      std::string_view(env("SLURM_STEP_ID")) != "batch" && std::string_view(env("SLURM_STEP_ID")) != "4294967294") {
    p.launcher = "slurm";
    p.rank = int(integer(env, "SLURM_PROCID", 0));
    const char* ntasks = first_set(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"});
    HONE_CHECK(ntasks != nullptr, "Slurm environment: SLURM_PROCID is set but neither SLURM_STEP_NUM_TASKS nor "
                                  "SLURM_NTASKS is");
    p.world_size = int(integer(env, ntasks, 1));
    p.local_rank = int(integer(env, "SLURM_LOCALID", 0));
    if (const char* per_node = first_set(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"})) {
      p.local_world_size = tasks_on_node(per_node, env(per_node), integer(env, "SLURM_NODEID", 0));
    } else {
      p.local_world_size = p.local_rank + 1;
    }
    if (const char* nodes = first_set(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})) {
      try {  // the first host alone: a job's list may name thousands
        p.master_addr = expand_slurm_nodelist(env(nodes), 1).front();
      } catch (const Error& e) {
        fail("environment variable {}: {}", nodes, e.what());
      }
    }
    // A port every task of the job derives alike, unless MASTER_PORT says otherwise.
    p.master_port = int(integer(env, "MASTER_PORT", 20000 + integer(env, "SLURM_JOB_ID", 0) % 20000));
    if (const char* addr = env("MASTER_ADDR")) p.master_addr = addr;
    check_consistent(p, "SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID");
    return p;
  }
  return p;
}

ProcessInfo discover_process() {
  return discover_process([](const char* name) -> const char* { return std::getenv(name); });
}

Device rank_device(const ProcessInfo& p, Device requested, const EnvLookup& env) {
  if (!requested.is_cuda() || p.local_world_size == 1) return requested;
  const char* visible = env("CUDA_VISIBLE_DEVICES");
  const bool one_visible =
      visible != nullptr && *visible != '\0' && std::string_view(visible).find(',') == std::string_view::npos;
  return Device::cuda(one_visible ? 0 : p.local_rank);
}

Device rank_device(const ProcessInfo& p, Device requested) {
  return rank_device(p, requested, [](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace hone::dist
