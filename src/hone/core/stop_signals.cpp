#include "hone/core/stop_signals.hpp"

#include <pthread.h>

#include <csignal>
#include <mutex>
#include <thread>

namespace hone {

namespace {

std::atomic<bool> g_catching{false}, g_stop{false};
std::atomic<int> g_signal{0};
std::once_flag g_started;

// SIGUSR1 too: Slurm sends it ahead of a job's end where asked to (sbatch
// --signal=USR1@90, Lightning's auto-requeue).
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGUSR1};

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  for (const int signal : kStopSignals) sigaddset(&set, signal);
  return set;
}

// Never runs (every thread blocks the signals): it only makes a signal that was
// ignored when the process started (SIGINT of a background job) reach sigwait.
extern "C" void never_called(int) {}

void wait_for_signals() {
  const sigset_t set = stop_set();
  for (;;) {
    int signal = 0;
    if (sigwait(&set, &signal) != 0) continue;
    if (g_catching && !g_stop) {
      g_signal = signal;
      g_stop = true;
      continue;
    }
    // Not caught, or a second one: the process ends by the signal, as by default.
    std::signal(signal, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, signal);
    pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
    raise(signal);
  }
}

}  // namespace

void take_stop_signals_on_their_own_thread() {
  std::call_once(g_started, [] {
    const sigset_t set = stop_set();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread(wait_for_signals).detach();
  });
}

void catch_stop_signals() {
  take_stop_signals_on_their_own_thread();  // a caller without main's (a test) has it started here
  for (const int signal : kStopSignals) {
    struct sigaction action {};
    action.sa_handler = never_called;
    sigemptyset(&action.sa_mask);
    sigaction(signal, &action, nullptr);
  }
  g_catching = true;
}

bool stop_requested() { return g_stop; }

const std::atomic<bool>& stop_requested_flag() { return g_stop; }

int stop_signal() { return g_signal; }

}  // namespace hone
