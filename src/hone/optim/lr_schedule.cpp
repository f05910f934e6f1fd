#include "hone/optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "hone/core/error.hpp"

namespace hone {

double LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return peak_lr * double(step + 1) / double(warmup_steps);
  const double span = double(std::max<int64_t>(total_steps - warmup_steps, 1));
  const double progress = std::clamp(double(step - warmup_steps) / span, 0.0, 1.0);
  switch (kind) {
    case LrScheduleKind::constant: return peak_lr;
    case LrScheduleKind::linear: return peak_lr + (min_lr - peak_lr) * progress;
    case LrScheduleKind::cosine:
      return min_lr + (peak_lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
    case LrScheduleKind::wsd: {
      // The last decay_fraction of all the steps decays (torchtitan's
      // decay_ratio), the first of them already below the peak; min_lr is
      // reached a step after the last, as torchtitan's "virtual last step" and
      // Megatron's decay do (the last step does not train at a learning rate of 0).
      const double decay_steps = double(wsd_decay_steps());
      const double into_decay = double(step) - (double(total_steps) - decay_steps);
      return into_decay <= 0 ? peak_lr : peak_lr + (min_lr - peak_lr) * std::min(into_decay / decay_steps, 1.0);
    }
  }
  HONE_ASSERT(false);
}

int64_t LrSchedule::wsd_decay_steps() const {
  const auto asked = int64_t(std::llround(decay_fraction * double(total_steps)));
  return std::max<int64_t>(1, std::min(asked, total_steps - warmup_steps));
}

bool LrSchedule::wsd_decay_clamped() const {
  return std::llround(decay_fraction * double(total_steps)) > total_steps - warmup_steps;
}

LrScheduleKind parse_lr_schedule(std::string_view name) {
  if (name == "constant") return LrScheduleKind::constant;
  if (name == "linear") return LrScheduleKind::linear;
  if (name == "cosine") return LrScheduleKind::cosine;
  if (name == "wsd" || name == "warmup_stable_decay") return LrScheduleKind::wsd;
  fail("unknown lr_scheduler.name '{}': expected constant, linear, cosine or wsd", name);
}

}  // namespace hone
