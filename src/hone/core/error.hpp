#pragma once
// The one error type of hone. Its message is complete and actionable on its own
// (it names the file, key or offset and what was expected); the CLI prints it
// on one line and exits with status 2.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace hone {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

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
