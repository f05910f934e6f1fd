#pragma once
// A status line redrawn in place on stderr while long work runs (preprocess,
// convert, eval's tasks): drawn only when stderr is a terminal, and cleared before anything
// else is printed and when the work ends, however it ends.
#include <fmt/core.h>
#include <unistd.h>

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

}  // namespace hone
