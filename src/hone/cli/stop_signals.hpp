#pragma once
// Ctrl-C (SIGINT) and SIGTERM for commands that write large outputs (preprocess,
// convert): the signal sets a flag the command polls, so that it stops between
// two pieces of work and removes what it half-wrote; a second signal stops at once.
#include <atomic>

namespace hone::cli {

void catch_stop_signals();
// Set once SIGINT or SIGTERM arrived after catch_stop_signals().
const std::atomic<bool>& stop_requested_flag();
// The signal that set it (0: none).
int stop_signal();

}  // namespace hone::cli
