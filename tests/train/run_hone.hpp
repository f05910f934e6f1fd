#pragma once
// Running the built `hone` binary from tests.
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "hone/core/files.hpp"  // hone::read_file

namespace hone::test {

struct Process {
  pid_t pid = -1;
};

// Starts `hone args...` with stdout and stderr to `log_path`.
Process start_hone(const std::vector<std::string>& args, const std::string& log_path);
// Waits; returns the exit status, or 128 + signal when killed.
int wait_for(const Process& p);
int run_hone_to_log(const std::vector<std::string>& args, const std::string& log_path);
// Waits up to 120 s for `text` to appear in the log `file` a running job writes.
// Signal tests send their signal once a step is logged: then the job catches it
// (a fixed delay was too short on a loaded machine).
bool wait_for_log_line(const std::string& file, const std::string& text);

// Runs `hone args...` with a terminal (a pty) as its stdout and stderr: what a
// user at a terminal sees, control sequences included.
struct TerminalRun {
  int status = -1;
  std::string screen;
};
TerminalRun run_hone_on_terminal(const std::vector<std::string>& args);

}  // namespace hone::test
