#include "hone/dist/mpi_watchdog.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "hone/core/error.hpp"
#include "hone/dist/communicator.hpp"

namespace hone::dist {

namespace {

// A query carries the tag its answer should use, new for every report, so an
// answer that arrives after its report gave up never matches a later one.
constexpr int kTagQuery = 1, kFirstReplyTag = 2;
// How long a rank whose operation timed out waits for its peers' answers.
constexpr double kAnswerSeconds = 3.0;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const char* op_name(int op) {
  static const char* names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier",
                                "send",       "recv",           "split",      "reduce",    "MPI_Comm_dup"};
  return op >= 0 && op < 10 ? names[op] : "?";
}

bool is_point_to_point(int op) { return op == int(MpiOp::send) || op == int(MpiOp::recv); }

// What a rank answers about one group: [collectives begun, op, peer, busy, ms since the last op began].
struct Answer {
  int64_t seq = 0, op = 0, peer = -1, busy = 0, age_ms = 0;
};

Answer answer_of(const WatchedState& s) {
  return {int64_t(s.seq.load()), s.op.load(), s.peer.load(), s.started_ns.load() != 0 ? 1 : 0,
          (now_ns() - s.last_ns.load()) / 1000000};
}

class Watchdog {
 public:
  static Watchdog& instance() {
    static Watchdog* w = new Watchdog();  // never destroyed: on_exit stops its thread
    return *w;
  }

  void add(std::shared_ptr<WatchedState> s) {
    std::lock_guard lock(mutex_);
    states_.push_back(std::move(s));
    if (!thread_.joinable() && threaded_) thread_ = std::thread([this] { loop(); });
  }

  void remove(const WatchedState* s) {
    std::lock_guard lock(mutex_);
    std::erase_if(states_, [&](const auto& p) { return p.get() == s; });
  }

  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  void set_threaded(bool threaded) { threaded_ = threaded; }

 private:
  void loop() {
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::lock_guard lock(mutex_);
      for (const auto& s : states_) answer_queries(*s);
      if (timeout_ <= 0) continue;
      for (const auto& s : states_) {
        const int64_t started = s->started_ns.load();
        if (started != 0 && double(now_ns() - started) * 1e-9 > timeout_) report(*s, started);
      }
    }
  }

  static void answer_queries(const WatchedState& s) {
    if (s.control == MPI_COMM_NULL) return;
    int flag = 1;
    while (flag) {
      MPI_Status status;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kTagQuery, s.control, &flag, &status) != MPI_SUCCESS || !flag) return;
      int64_t reply_tag = 0;
      MPI_Recv(&reply_tag, 1, MPI_INT64_T, status.MPI_SOURCE, kTagQuery, s.control, MPI_STATUS_IGNORE);
      Answer a = answer_of(s);
      MPI_Send(&a, 5, MPI_INT64_T, status.MPI_SOURCE, int(reply_tag), s.control);
    }
  }

  // Asks the peers of `s` where they are, then ends the job with one line.
  void report(const WatchedState& s, int64_t started) {
    if (s.control == MPI_COMM_NULL) {
      abort_job(fmt::format("rank {}: creating the communicator {} ({}) did not complete within {:.0f} s "
                            "(HONE_DIST_TIMEOUT): a rank of it has not joined (hung, stopped or dead)",
                            s.world_ranks[size_t(s.rank)], s.name, op_name(s.op.load()), timeout_));
    }
    const int op = s.op.load(), target = s.peer.load();
    const uint64_t seq = s.seq.load();
    const int size = int(s.world_ranks.size());
    std::vector<int> peers;
    for (int r = 0; r < size; ++r) {
      if (r != s.rank && (!is_point_to_point(op) || r == target)) peers.push_back(r);
    }
    std::vector<Answer> answers(static_cast<size_t>(size));
    std::vector<int> answered(static_cast<size_t>(size), 0);
    std::vector<MPI_Request> requests;
    static int64_t reply_tag = kFirstReplyTag - 1;
    reply_tag = reply_tag >= 30000 ? kFirstReplyTag : reply_tag + 1;  // MPI guarantees tags up to 32767
    for (int r : peers) {
      MPI_Request send, recv;
      MPI_Isend(&reply_tag, 1, MPI_INT64_T, r, kTagQuery, s.control, &send);
      MPI_Request_free(&send);
      MPI_Irecv(&answers[size_t(r)], 5, MPI_INT64_T, r, int(reply_tag), s.control, &recv);
      requests.push_back(recv);
    }
    const int64_t deadline = now_ns() + int64_t(kAnswerSeconds * 1e9);
    while (now_ns() < deadline) {
      bool all = true;
      for (size_t i = 0; i < peers.size(); ++i) {
        if (!answered[size_t(peers[i])]) MPI_Test(&requests[i], &answered[size_t(peers[i])], MPI_STATUS_IGNORE);
        all = all && answered[size_t(peers[i])];
      }
      if (all) break;
      // A peer that timed out too is waiting for our answer.
      for (const auto& other : states_) answer_queries(*other);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (size_t i = 0; i < peers.size(); ++i) {
      if (answered[size_t(peers[i])]) continue;
      MPI_Cancel(&requests[i]);
      MPI_Status status;
      MPI_Wait(&requests[i], &status);
      int cancelled = 0;
      MPI_Test_cancelled(&status, &cancelled);
      answered[size_t(peers[i])] = !cancelled;
    }
    if (s.started_ns.load() != started) return;  // it completed while we asked

    std::vector<std::string> missing, silent;
    for (int r : peers) {
      const Answer& a = answers[size_t(r)];
      const int world = s.world_ranks[size_t(r)];
      if (!answered[size_t(r)]) {
        silent.push_back(std::to_string(world));
        continue;
      }
      const std::string where =
          a.busy ? fmt::format("it is in {} #{} there, begun {:.1f} s ago", op_name(int(a.op)), a.seq,
                               double(a.age_ms) / 1000)
                 : fmt::format("its last operation there was {} #{}, begun {:.1f} s ago", op_name(int(a.op)),
                               a.seq, double(a.age_ms) / 1000);
      if (is_point_to_point(op)) {
        const int expected = op == int(MpiOp::send) ? int(MpiOp::recv) : int(MpiOp::send);
        if (!(a.busy && a.op == expected && a.peer == s.rank)) {
          missing.push_back(fmt::format("rank {} has not posted the matching {} ({})", world, op_name(expected),
                                        where));
        }
      } else if (uint64_t(a.seq) < seq) {
        missing.push_back(fmt::format("rank {} has not called it ({})", world, where));
      }
    }
    std::string what = is_point_to_point(op)
                           ? fmt::format("{} {} rank {}", op_name(op), op == int(MpiOp::send) ? "to" : "from",
                                         s.world_ranks[size_t(target)])
                           : fmt::format("{} #{}", op_name(op), seq);
    std::string causes;
    if (!missing.empty()) causes += fmt::format("{}", fmt::join(missing, "; "));
    if (!silent.empty()) {
      if (!causes.empty()) causes += "; ";
      causes += fmt::format("rank{} {} did not answer within {:.0f} s (hung, stopped or dead)",
                            silent.size() > 1 ? "s" : "", fmt::join(silent, ", "), kAnswerSeconds);
    }
    if (causes.empty()) causes = "every rank has called it, yet it did not complete";
    abort_job(fmt::format("rank {}: {} ({} elements) in {} did not complete within {:.0f} s (HONE_DIST_TIMEOUT): {}",
                          s.world_ranks[size_t(s.rank)], what, s.count.load(), s.name, timeout_, causes));
  }

  [[noreturn]] static void abort_job(const std::string& why) {
    std::fflush(stdout);
    std::fprintf(stderr, "hone: error: %s; aborting the job\n", why.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    std::abort();  // MPI_Abort does not return
  }

  std::mutex mutex_;
  std::vector<std::shared_ptr<WatchedState>> states_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  bool threaded_ = true;
  const double timeout_ = collective_timeout_seconds();
};

// Runs at exit: a clean exit finalises MPI; any other status brings the whole job
// down now rather than leaving the peers to wait in their next collective.
void finish_mpi(int status, void*) {
  Watchdog::instance().stop();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (status == 0) {
    MPI_Finalize();
  } else {
    // Said here, not left to mpirun, whose own report of an MPI_Abort can get
    // lost; unless hone launch's process that runs this one's command says it.
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fflush(stdout);
    if (std::getenv("HONE_LAUNCH_RANK_REPORTS") == nullptr) {
      std::fprintf(stderr, "hone: rank %d exited with status %d; ending the MPI job\n", rank, status);
    }
    std::fflush(stderr);
    // A moment's grace before the abort kills the other ranks: those that
    // found the same fault (a check every rank makes) say so in their own
    // words and remove what they made (a new output_dir), as they do alone.
    std::this_thread::sleep_for(std::chrono::seconds(1));
    MPI_Abort(MPI_COMM_WORLD, status);
  }
}

}  // namespace

Watch::Watch(WatchedState& state, MpiOp op, int64_t count, int peer, bool begins) : state_(state) {
  state.op = int(op);
  state.peer = peer;
  state.count = count;
  if (begins && !is_point_to_point(int(op))) ++state.seq;
  const int64_t t = now_ns();
  state.last_ns = t;
  state.started_ns = t;
}

Watch::~Watch() { state_.started_ns = 0; }

void ensure_mpi_initialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  // A bad HONE_DIST_TIMEOUT is an error here, before MPI starts, not in the
  // watchdog built later (at exit, where an exception aborts the process).
  collective_timeout_seconds();
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    Watchdog::instance().set_threaded(false);
    fmt::print(stderr, "hone: warning: this MPI library lacks MPI_THREAD_MULTIPLE; collectives run without "
                       "the HONE_DIST_TIMEOUT watchdog\n");
  }
  on_exit(finish_mpi, nullptr);
}

void start_watching(std::shared_ptr<WatchedState> state) { Watchdog::instance().add(std::move(state)); }

void stop_watching(const WatchedState* state) { Watchdog::instance().remove(state); }

}  // namespace hone::dist
