#include "run_hone.hpp"

#include <fcntl.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

namespace hone::test {

namespace {

// In a forked child: becomes `hone args...`.
[[noreturn]] void exec_hone(const std::vector<std::string>& args) {
  const std::string binary = std::string(HONE_BINARY_DIR) + "/bin/hone";
  std::vector<char*> argv{const_cast<char*>(binary.c_str())};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(binary.c_str(), argv.data());
  ::_exit(127);
}

}  // namespace

Process start_hone(const std::vector<std::string>& args, const std::string& log_path) {
  Process p;
  p.pid = ::fork();
  if (p.pid == 0) {
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    exec_hone(args);
  }
  return p;
}

TerminalRun run_hone_on_terminal(const std::vector<std::string>& args) {
  int terminal = -1;
  Process p;
  p.pid = ::forkpty(&terminal, nullptr, nullptr, nullptr);
  if (p.pid == 0) exec_hone(args);
  TerminalRun run;
  if (p.pid < 0) return run;
  char buffer[4096];
  for (ssize_t n; (n = ::read(terminal, buffer, sizeof buffer)) > 0;) run.screen.append(buffer, size_t(n));
  ::close(terminal);
  run.status = wait_for(p);
  return run;
}

int wait_for(const Process& p) {
  int status = 0;
  ::waitpid(p.pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int run_hone_to_log(const std::vector<std::string>& args, const std::string& log_path) {
  return wait_for(start_hone(args, log_path));
}

bool wait_for_log_line(const std::string& file, const std::string& text) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  const auto logged = [&] { return std::filesystem::exists(file) && read_file(file).find(text) != std::string::npos; };
  while (!logged() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return logged();
}

}  // namespace hone::test
