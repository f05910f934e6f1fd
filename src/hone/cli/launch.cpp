// hone launch --nproc-per-node N [--nnodes M --node-rank R --master-addr A --master-port P] [--log-dir DIR]
//             -- COMMAND ARGS...
// torchrun's interface: starts N processes of COMMAND on this node with RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT set. They are started through Open MPI's mpirun (one
// MPMD entry per rank), because Open MPI forms a world only among processes its runtime started:
// so one node's processes share one MPI world, and every rank can also bootstrap NCCL. Each
// output line is prefixed with its rank; when a rank fails, mpirun stops the others and this
// command ends with one line naming the rank. A first SIGINT or SIGTERM goes to the ranks, so
// that a training run checkpoints and the job ends cleanly; a second one ends the job.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <map>
#include <optional>
#include <regex>
#include <thread>
#include <utility>

#include "hone/cli/commands.hpp"
#include "hone/core/error.hpp"
#include "hone/core/files.hpp"

namespace hone::cli {
namespace {

namespace fs = std::filesystem;

// The handler only records a signal; the output loop forwards it (see forward_signal).
volatile std::sig_atomic_t g_signal = 0, g_signals_received = 0;

extern "C" void record_signal(int signal) {
  g_signal = signal;
  g_signals_received = g_signals_received + 1;
}

// mpirun answers SIGINT and SIGTERM by ending the job: its ranks get SIGKILL a
// second later, too soon for a training run to save its checkpoint. So the first
// of these (and SIGUSR1, Slurm's warning before a time limit) goes to the ranks
// themselves (mpirun's children): hone's training loop finishes its step, saves
// and exits 0, and the job ends cleanly. A second signal, or any other, goes to
// mpirun (one within a second of the first is the same signal sent again, e.g.
// by `timeout` to its process group: it is dropped). A signal that reaches
// mpirun itself (scancel signals every process of a Slurm step) ends the job
// that way: under Slurm, srun starts the ranks (docs/distributed.md).
void forward_signal(pid_t mpirun, int signal, bool first) {
  std::vector<pid_t> ranks;
  if (first && (signal == SIGINT || signal == SIGTERM || signal == SIGUSR1)) {
    std::error_code gone;  // mpirun may have exited meanwhile
    for (const auto& task : fs::directory_iterator(fmt::format("/proc/{}/task", mpirun), gone)) {
      std::ifstream children(task.path() / "children");
      for (pid_t pid; children >> pid;) ranks.push_back(pid);
    }
  }
  if (ranks.empty()) ranks.push_back(mpirun);  // not started yet, or a later signal
  for (const pid_t pid : ranks) ::kill(pid, signal);
}

// The executable file `name` names: a path, or a name found on PATH.
std::optional<std::string> find_in_path(const std::string& name) {
  const auto runnable = [](const fs::path& p) { return fs::is_regular_file(p) && ::access(p.c_str(), X_OK) == 0; };
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) return runnable(name) ? std::optional(name) : std::nullopt;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const fs::path candidate = fs::path(dirs.substr(start, end - start)) / name;
    if (runnable(candidate)) return candidate.string();
    start = end + 1;
  }
  return std::nullopt;
}

// The process mpirun starts for a rank whose command is not hone. It runs the
// command and, when that fails, says which rank failed as hone's own ranks do
// (dist/mpi_watchdog.cpp): mpirun's account of it is sometimes lost in the
// race of stopping the others. Signals pass on to the command.
volatile std::sig_atomic_t g_rank_command = 0, g_passed_signal = 0;

extern "C" void pass_to_command(int signal) {
  g_passed_signal = signal;
  ::kill(pid_t(g_rank_command), signal);
}

int run_rank(const std::vector<std::string>& command) {
  const char* rank = std::getenv("LOCAL_RANK");  // the rank in this node's MPI world, as mpirun numbers it
  HONE_CHECK(rank != nullptr, "hone launch-rank runs one rank's command for hone launch, which sets LOCAL_RANK; run "
             "hone launch --nproc-per-node N -- COMMAND");
  sigset_t passed, before;
  sigemptyset(&passed);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) sigaddset(&passed, s);
  ::sigprocmask(SIG_BLOCK, &passed, &before);  // until the handlers know the command's pid
  const pid_t child = ::fork();
  HONE_CHECK(child >= 0, "hone launch: fork failed");
  if (child == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // mpirun's SIGKILL of this process reaches the command
    ::sigprocmask(SIG_SETMASK, &before, nullptr);
    ::setenv("HONE_LAUNCH_RANK_REPORTS", "1", 1);  // a hone inside leaves the report to this process
    std::vector<char*> c_argv;
    for (const std::string& a : command) c_argv.push_back(const_cast<char*>(a.c_str()));
    c_argv.push_back(nullptr);
    ::execvp(c_argv[0], c_argv.data());
    std::fprintf(stderr, "hone launch: cannot run %s: %s\n", c_argv[0], std::strerror(errno));
    ::_exit(127);
  }
  g_rank_command = child;
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) std::signal(s, pass_to_command);
  ::sigprocmask(SIG_SETMASK, &before, nullptr);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    // One passed on (mpirun stopping the job, a user's signal) is not this rank's failure.
    if (signal != g_passed_signal) {
      std::fprintf(stderr, "hone: rank %s was killed by signal %d (%s)\n", rank, signal, strsignal(signal));
      std::fflush(stderr);
    }
    std::signal(signal, SIG_DFL);  // and this process dies of it too, for mpirun
    ::prctl(PR_SET_DUMPABLE, 0);   // without a second core file
    ::kill(::getpid(), signal);
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code != 0) std::fprintf(stderr, "hone: rank %s exited with status %d; ending the MPI job\n", rank, code);
  return code;
}

struct Options {
  int nproc_per_node = 1, nnodes = 1, node_rank = 0, master_port = 29500;
  std::string master_addr = "127.0.0.1", log_dir;
  std::vector<std::string> command;
};

// mpirun's argument list: one MPMD entry per local rank, each with its own environment.
std::vector<std::string> mpirun_argv(const Options& o, const std::string& mpirun) {
  std::vector<std::string> argv{mpirun, "--oversubscribe", "--bind-to", "none", "--tag-output"};
  if (::geteuid() == 0) argv.push_back("--allow-run-as-root");  // containers run as root
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  std::vector<std::string> command = o.command;
  if (command[0] == "hone") {
    command[0] = self;  // this very binary, whose ranks say themselves when they fail
  } else {
    command.insert(command.begin(), {self, "launch-rank", "--"});
  }
  // Each rank gets an equal share of the cores unless the user chose.
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string threads = omp ? omp : std::to_string(std::max(1u, cores / unsigned(o.nproc_per_node)));
  const int world = o.nproc_per_node * o.nnodes;
  for (int local = 0; local < o.nproc_per_node; ++local) {
    if (local > 0) argv.push_back(":");
    const int rank = o.node_rank * o.nproc_per_node + local;
    argv.insert(argv.end(), {"-np", "1"});
    for (const std::string& kv :
         {fmt::format("RANK={}", rank), fmt::format("WORLD_SIZE={}", world), fmt::format("LOCAL_RANK={}", local),
          fmt::format("LOCAL_WORLD_SIZE={}", o.nproc_per_node), fmt::format("GROUP_RANK={}", o.node_rank),
          fmt::format("MASTER_ADDR={}", o.master_addr), fmt::format("MASTER_PORT={}", o.master_port),
          fmt::format("OMP_NUM_THREADS={}", threads)}) {
      argv.insert(argv.end(), {"-x", kv});
    }
    argv.insert(argv.end(), command.begin(), command.end());
  }
  return argv;
}

// Reads mpirun's output, rewrites its "[1,R]<stdout>:" tags into "[rank G] ", copies
// each rank's lines to its log file, and remembers mpirun's own lines naming a failed rank.
class OutputRouter {
 public:
  OutputRouter(const Options& o) : options_(o) {
    if (o.log_dir.empty()) return;
    create_folders("--log-dir", o.log_dir);
    for (int local = 0; local < o.nproc_per_node; ++local) {
      const int rank = o.node_rank * o.nproc_per_node + local;
      logs_.emplace_back(fs::path(o.log_dir) / fmt::format("rank_{}.log", rank));
      HONE_CHECK(logs_.back().good(), "hone launch: cannot write {}/rank_{}.log", o.log_dir, rank);
    }
  }

  void line(const std::string& text, FILE* out) {
    // mpirun's help texts come between lines of dashes; the one about an
    // MPI_Abort (how a rank's error ends the job) repeats what the rank's own
    // error line and launch's summary say, so it is read, not shown.
    // So do its notes on gathering the ranks' copies of that text, or failing to.
    if (text.find("ORTE_ERROR_LOG: ") != std::string::npos && text.find("show_help.c") != std::string::npos) return;
    if (text.find("has sent help message help-mpi-api.txt / mpi-abort") != std::string::npos) {
      abort_aggregated_ = true;
      return;
    }
    if (std::exchange(abort_aggregated_, false) && text.find("orte_base_help_aggregate") != std::string::npos) return;
    std::vector<std::string>& block = help_blocks_[out];
    const bool dashes = text.size() >= 20 && text.find_first_not_of('-') == std::string::npos;
    if (dashes || !block.empty()) {
      block.push_back(text);
      remember_failure(text);
      if (dashes && block.size() > 1) finish_block(out);
      return;
    }
    route(text, out);
  }

  // The end of the output: a help block left open is shown as it is.
  void flush() {
    for (auto& [out, block] : help_blocks_) {
      for (const std::string& text : block) fmt::print(out, "{}\n", text);
      block.clear();
    }
    for (auto& [where, held] : held_pieces_) {
      if (!held.empty()) rank_line(where.second, held, where.first);
      held.clear();
    }
  }

  // A rank's own account of a timeout tells more than mpirun's report of the
  // abort that follows it, and the two arrive in either order.
  // mpirun's count of ranks that failed, when it names none of them, comes last.
  const std::string& failure() const {
    return !timed_out_.empty() ? timed_out_ : !failure_.empty() ? failure_ : nonzero_;
  }

 private:
  void finish_block(FILE* out) {
    std::vector<std::string>& block = help_blocks_[out];
    // Those about an MPI_Abort, or about ranks that returned a non-zero status
    // (the first named) or died of a signal, say no more than launch's last line.
    const bool summarized = std::ranges::any_of(block, [](const std::string& t) {
      return t.starts_with("MPI_ABORT was invoked") || t.starts_with("Primary job  terminated normally") ||
             t.starts_with("mpirun detected that one or more processes exited with non-zero status") ||
             t.starts_with("mpirun noticed that process rank");
    });
    if (!summarized) {
      for (const std::string& text : block) fmt::print(out, "{}\n", text);
    }
    block.clear();
  }

  // mpirun tags each piece a rank writes, so a line written in pieces arrives
  // with other ranks' pieces between its own, each behind its tag, and only the
  // last piece ends the line: the others are held for their rank until then.
  void route(const std::string& text, FILE* out) {
    static const std::regex tag(R"(\[\d+,(\d+)\]<(?:stdout|stderr)>:)");
    const std::sregex_iterator end, first(text.begin(), text.end(), tag);
    if (first == end || first->position() != 0) {
      fmt::print(out, "{}\n", text);
      remember_failure(text);
      std::fflush(out);
      return;
    }
    for (auto it = first; it != end; ++it) {
      const auto next = std::next(it);
      const size_t from = size_t(it->position() + it->length());
      const size_t to = next == end ? text.size() : size_t(next->position());
      const int local = std::stoi((*it)[1]);
      std::string& held = held_pieces_[{out, local}];
      held += text.substr(from, to - from);
      if (next != end) continue;
      rank_line(local, held, out);
      held.clear();
    }
  }

  void rank_line(int local, const std::string& text, FILE* out) {
    fmt::print(out, "[rank {}] {}\n", global(local), text);
    if (!logs_.empty() && local < int(logs_.size())) logs_[size_t(local)] << text << '\n' << std::flush;
    remember_failure(text);
    std::fflush(out);
  }

  int global(int local) const { return options_.node_rank * options_.nproc_per_node + local; }
  int global(const std::string& local) const { return global(std::stoi(local)); }

  void remember_failure(const std::string& text) {
    static const std::regex name(R"(Process name: \[\[\d+,\d+\],(\d+)\])"), code(R"(Exit code:\s+(\d+))"),
        signal(R"(process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+) \(([^)]*)\))"),
        improper(R"(due to process rank (\d+) with PID)"),
        abort(R"(MPI_ABORT was invoked on rank (\d+) in communicator)"), errorcode(R"(with errorcode (\d+))"),
        nonzero(R"(but (\d+) process(es)? returned)"),
        hone_exit(R"(^hone: rank (\d+) exited with status (\d+); ending the MPI job)"),
        hone_signal(R"(^hone: rank (\d+) was killed by signal (\d+) \(([^)]*)\))"),
        timeout(R"(^hone: error: rank (\d+): (.+) did not complete within (\d+) s \(HONE_DIST_TIMEOUT\): (.+); aborting)");
    std::smatch m;
    if (std::regex_search(text, m, timeout)) {
      if (timed_out_.empty()) {
        timed_out_ = fmt::format("rank {} gave up on {} after {} s: {}", global(m[1]), m[2].str(), m[3].str(),
                                 m[4].str());
      }
    } else if (std::regex_search(text, m, hone_exit)) {
      set(fmt::format("rank {} failed with status {}", global(m[1]), m[2].str()));
    } else if (std::regex_search(text, m, hone_signal) || std::regex_search(text, m, signal)) {
      set(fmt::format("rank {} was killed by signal {} ({})", global(m[1]), m[2].str(), m[3].str()));
    } else if (std::regex_search(text, m, name)) {
      pending_rank_ = global(m[1]);
    } else if (pending_rank_ >= 0 && std::regex_search(text, m, code)) {
      set(fmt::format("rank {} failed with status {}", pending_rank_, m[1].str()));
    } else if (std::regex_search(text, m, improper)) {
      set(fmt::format("rank {} exited before the others without finishing (status 0, no MPI_Finalize)",
                      global(m[1])));
    } else if (std::regex_search(text, m, abort)) {
      pending_rank_ = global(m[1]);
    } else if (pending_rank_ >= 0 && std::regex_search(text, m, errorcode)) {
      set(fmt::format("rank {} failed with status {} (MPI_Abort)", pending_rank_, m[1].str()));
    } else if (std::regex_search(text, m, nonzero)) {  // mpirun names no rank here
      nonzero_ = m[2].matched ? fmt::format("{} ranks exited with a non-zero status", m[1].str())
                              : "a rank exited with a non-zero status";
    }
  }

  void set(std::string what) {
    if (failure_.empty()) failure_ = std::move(what);
  }

  const Options& options_;
  std::vector<std::ofstream> logs_;
  std::map<FILE*, std::vector<std::string>> help_blocks_;  // an open block of mpirun's help text, per stream
  std::map<std::pair<FILE*, int>, std::string> held_pieces_;  // a line's pieces so far, per stream and local rank
  bool abort_aggregated_ = false;  // the last line said more ranks sent the MPI_Abort text
  int pending_rank_ = -1;
  std::string failure_, timed_out_, nonzero_;
};

int launch(const Options& o) {
  HONE_CHECK(o.nproc_per_node >= 1, "--nproc-per-node must be at least 1, got {}", o.nproc_per_node);
  HONE_CHECK(o.nnodes >= 1, "--nnodes must be at least 1, got {}", o.nnodes);
  HONE_CHECK(o.node_rank >= 0 && o.node_rank < o.nnodes, "--node-rank {} must be in [0, --nnodes {})", o.node_rank,
             o.nnodes);
  HONE_CHECK(o.master_port > 0 && o.master_port < 65536, "--master-port {} is not a port", o.master_port);
  HONE_CHECK(!o.command.empty(), "hone launch needs a command after '--', e.g. hone launch --nproc-per-node 2 -- "
                                 "hone run pretrain --config my.yaml");
  HONE_CHECK(o.command[0] == "hone" || find_in_path(o.command[0]), "{}: no such command (not a file, nor on PATH)",
             o.command[0]);
  const char* override = std::getenv("HONE_MPIRUN");
  const auto mpirun = find_in_path(override ? override : "mpirun");
  HONE_CHECK(mpirun.has_value() || override == nullptr,
             "HONE_MPIRUN='{}' names no program to run (give the path of Open MPI's mpirun, or unset it)", override);
  HONE_CHECK(mpirun.has_value(), "hone launch starts its processes through Open MPI's mpirun, which is not on PATH "
                                 "(Debian: apt-get install openmpi-bin)");
  const std::vector<std::string> argv = mpirun_argv(o, *mpirun);
  OutputRouter router(o);

  int out_pipe[2], err_pipe[2];
  HONE_CHECK(::pipe(out_pipe) == 0 && ::pipe(err_pipe) == 0, "hone launch: pipe failed");
  const pid_t launcher = ::getpid();
  const pid_t child = ::fork();
  HONE_CHECK(child >= 0, "hone launch: fork failed");
  if (child == 0) {
    ::setpgid(0, 0);  // signals reach mpirun through us, once
    // A launcher killed outright (SIGKILL) takes mpirun, and so the ranks, with it.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != launcher) ::_exit(128 + SIGTERM);  // it died before prctl
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    std::vector<char*> c_argv;
    for (const std::string& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
    c_argv.push_back(nullptr);
    ::execv(c_argv[0], c_argv.data());
    std::fprintf(stderr, "hone launch: cannot run %s: %s\n", c_argv[0], std::strerror(errno));
    ::_exit(127);
  }
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) std::signal(s, record_signal);
  int signals_forwarded = 0;
  std::chrono::steady_clock::time_point first_signal;
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);

  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string pending[2];
  FILE* outs[2] = {stdout, stderr};
  int open = 2;
  while (open > 0) {
    if (g_signals_received > signals_forwarded) {
      const auto now = std::chrono::steady_clock::now();
      if (signals_forwarded == 0) {
        forward_signal(child, g_signal, true);
        first_signal = now;
      } else if (now - first_signal > std::chrono::seconds(1)) {
        forward_signal(child, g_signal, false);
      }
      signals_forwarded = g_signals_received;
    }
    // A signal interrupts poll; the timeout catches one that lands just before it.
    if (::poll(fds, 2, 200) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buffer[65536];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        if (!pending[i].empty()) router.line(pending[i], outs[i]);
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open;
        continue;
      }
      pending[i].append(buffer, size_t(n));
      size_t newline;
      while ((newline = pending[i].find('\n')) != std::string::npos) {
        router.line(pending[i].substr(0, newline), outs[i]);
        pending[i].erase(0, newline + 1);
      }
    }
  }
  router.flush();
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code != 0) {
    const std::string cause = !router.failure().empty() ? router.failure()
                              : signals_forwarded > 0 ? fmt::format("stopped by signal {}", int(g_signal))
                                                      : "the job failed";
    fmt::print(stderr, "hone launch: {}; the job of {} ranks was stopped (mpirun exit status {})\n", cause,
               o.nproc_per_node * o.nnodes, code);
  }
  return code;
}

}  // namespace

Command add_launch(CLI::App& app) {
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "launch", "Start N processes of a command on this node, like torchrun: hone launch --nproc-per-node 2 -- "
                "hone run pretrain --config my.yaml");
  // torchrun's flags, in either of its spellings (--nproc-per-node, --nproc_per_node).
  sub->add_option("--nproc-per-node,--nproc_per_node", o->nproc_per_node, "Processes on this node (one per GPU)")
      ->required();
  sub->add_option("--nnodes", o->nnodes, "Nodes in the job (a hone launch runs on each)")->capture_default_str();
  sub->add_option("--node-rank,--node_rank", o->node_rank, "This node's index, 0..nnodes-1")->capture_default_str();
  sub->add_option("--master-addr,--master_addr", o->master_addr, "Host of rank 0 (the NCCL rendezvous)")
      ->capture_default_str();
  sub->add_option("--master-port,--master_port", o->master_port, "Port of the rendezvous")->capture_default_str();
  auto rendezvous = std::make_shared<std::string>();
  sub->add_option("--rdzv-endpoint,--rdzv_endpoint", *rendezvous,
                  "HOST[:PORT] of the rendezvous, torchrun's form of --master-addr and --master-port");
  auto unused = std::make_shared<std::string>();
  sub->add_option("--rdzv-backend,--rdzv_backend,--rdzv-id,--rdzv_id", *unused,
                  "torchrun's; accepted and unused (the ranks meet at --master-addr:--master-port)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  sub->add_flag("--standalone")->description(
      "torchrun's single-node rendezvous: hone launch's own on one node (no effect)");
  auto restarts = std::make_shared<int>(0);
  sub->add_option("--max-restarts,--max_restarts", *restarts,
                  "torchrun's; hone launch restarts nothing (0 only): resume=latest continues a run from its last "
                  "checkpoint");
  sub->add_option("--log-dir,--log_dir", o->log_dir, "Also write each rank's output to DIR/rank_N.log");
  sub->add_option("command", o->command, "The command each process runs, after '--'")->required();
  return [o, rendezvous, restarts, unused] {
    HONE_CHECK(*restarts == 0, "--max-restarts {}: hone launch does not restart failed ranks (torchrun's "
               "--max-restarts); a training run with resume=latest continues from its last checkpoint", *restarts);
    if (!rendezvous->empty()) {
      const size_t colon = rendezvous->rfind(':');
      o->master_addr = rendezvous->substr(0, colon);
      if (colon != std::string::npos) {
        const std::string port = rendezvous->substr(colon + 1);
        int value = 0;
        const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), value);
        HONE_CHECK(error == std::errc() && end == port.data() + port.size(), "--rdzv-endpoint {}: '{}' is not a port",
                   *rendezvous, port);
        o->master_port = value;
      }
    }
    return launch(*o);
  };
}

// Hidden from --help: what mpirun starts for each rank of a command that is not hone.
Command add_launch_rank(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("launch-rank", "")->group("");
  auto command = std::make_shared<std::vector<std::string>>();
  sub->add_option("command", *command)->required();
  return [command] { return run_rank(*command); };
}

}  // namespace hone::cli
