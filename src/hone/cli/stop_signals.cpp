#include "hone/cli/stop_signals.hpp"

#include <csignal>

namespace hone::cli {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};

extern "C" void on_stop_signal(int signal) {
  g_signal = signal;
  g_stop = true;
}

}  // namespace

void catch_stop_signals() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  action.sa_flags = SA_RESETHAND;  // a second signal stops at once
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

const std::atomic<bool>& stop_requested_flag() { return g_stop; }

int stop_signal() { return g_signal; }

}  // namespace hone::cli
