#pragma once
// Learning-rate schedules by step: constant, linear, cosine (each after a linear
// warmup) and warmup-stable-decay.
#include <cstdint>
#include <string_view>

namespace hone {

enum class LrScheduleKind { constant, linear, cosine, wsd };

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::cosine;
  double peak_lr = 3e-4;
  double min_lr = 0.0;          // where linear, cosine and the decay of wsd end
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;      // the step at which decay reaches min_lr
  double decay_fraction = 0.1;  // wsd: the last fraction of total_steps decays

  // The learning rate of 0-based step `step`.
  double at(int64_t step) const;
  // wsd: the steps that decay, decay_fraction of total_steps rounded, but at
  // most those after the warmup (as torchtitan clamps them) and at least one.
  int64_t wsd_decay_steps() const;
  // wsd: decay_fraction would reach into the warmup (wsd_decay_steps clamps it).
  bool wsd_decay_clamped() const;
};

LrScheduleKind parse_lr_schedule(std::string_view name);

}  // namespace hone
