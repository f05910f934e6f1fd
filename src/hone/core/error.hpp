#pragma once
// The one error type of hone. Its message is complete and actionable on its own
// (it names the file, key or offset and what was expected); the CLI prints it
// on one line and exits with status 2.
#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace hone {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where the error that ends the process is written besides stderr: the
// train.log of the run in progress (its console names it), so that a run's log
// says how the run ended.
void set_fatal_error_log(std::string path);
// Prints "hone: PREFIX: TEXT" on stderr and appends the line to that log, if any.
void report_fatal_error(std::string_view text, std::string_view prefix = "error");

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace hone

// Checks a condition that user input or configuration can break.
#define HONE_CHECK(cond, ...)          \
  do {                                 \
    if (!(cond)) ::hone::fail(__VA_ARGS__); \
  } while (0)

// Checks an invariant of hone itself; failing it is a bug in hone.
#define HONE_ASSERT(cond)                                                         \
  do {                                                                            \
    if (!(cond))                                                                  \
      ::hone::fail("internal error at {}:{}: {} does not hold", __FILE__, __LINE__, #cond); \
  } while (0)
