#include "hone/core/progress_line.hpp"

#include <algorithm>

#include "hone/core/text.hpp"

namespace hone {

void ParameterProgress::update(int64_t done, int64_t total) {
  if (!line_.on_terminal()) return;
  const auto now = std::chrono::steady_clock::now();
  if (done < total && now - drawn_ < std::chrono::milliseconds(250)) return;
  drawn_ = now;
  line_.draw(fmt::format("{}: {} of {} parameters ({:.0f}%), {:.0f} s", verb_, format_count(done), format_count(total),
                         100.0 * double(done) / double(std::max<int64_t>(total, 1)),
                         std::chrono::duration<double>(now - started_).count()));
}

}  // namespace hone
