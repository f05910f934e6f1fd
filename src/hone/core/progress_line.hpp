#pragma once
// A status line redrawn in place on stderr while long work runs (preprocess,
// convert, a model's weights loading, eval's tasks): drawn only when stderr is a terminal, and cleared before anything
// else is printed and when the work ends, however it ends.
#include <fmt/core.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace hone {

class ProgressLine {
 public:
  ProgressLine() : terminal_(::isatty(STDERR_FILENO) != 0) {}
  ~ProgressLine() { clear(); }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  bool on_terminal() const { return terminal_; }
  void draw(const std::string& text) {
    if (!terminal_) return;
    fmt::print(stderr, "\r\033[K{}", text);
    std::fflush(stderr);
    drawn_ = true;
  }
  void clear() {
    if (drawn_) fmt::print(stderr, "\r\033[K");
    drawn_ = false;
  }

 private:
  bool terminal_;
  bool drawn_ = false;
};

// "converting: 1.20B of 8.03B parameters (15%), 3 s": a model's weights going
// through, redrawn at most every 250 ms and when the last arrive.
class ParameterProgress {
 public:
  explicit ParameterProgress(std::string verb) : verb_(std::move(verb)) {}
  void update(int64_t done, int64_t total);
  void clear() { line_.clear(); }

 private:
  std::string verb_;
  ProgressLine line_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now(), drawn_ = started_;
};

}  // namespace hone
