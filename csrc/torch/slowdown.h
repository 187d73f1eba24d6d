// A deliberate slowdown, compiled in only when asked for: FUSED_NORM_SLOWDOWN_PERCENT (an integer percent,
// absent = 0 = no code at all). It exists to measure the benchmarks' power: a build that is known to be P %
// slower, held against one that is not, must be flagged.
//
// An adapter puts one CallSlowdown in each call of the op. On leaving the call it busy-waits P % of the
// call's period: the time inside the call (checks, allocation, kernel) plus the gap since the previous call
// left it, which back to back is the time the framework takes from one call into the next (and the release
// of the previous call's output). So the wait is proportional to the row's own time per call, whatever its
// shape, and is measured call by call: a wait sized beforehand would be another share of the row on a
// machine whose load changes the op's time. A gap longer than kGapCap and than kGapInsideShare of the inside
// time is not the call's overhead (the first call of a block, a model's other layers between two norms):
// only the inside time counts then.
#pragma once

#include <algorithm>
#include <chrono>

#ifndef FUSED_NORM_SLOWDOWN_PERCENT
#define FUSED_NORM_SLOWDOWN_PERCENT 0
#endif

namespace fused_norm {

constexpr int kSlowdownPercent = FUSED_NORM_SLOWDOWN_PERCENT;
static_assert(kSlowdownPercent >= 0 && kSlowdownPercent <= 1000, "FUSED_NORM_SLOWDOWN_PERCENT: 0..1000");

class CallSlowdown {
 public:
  CallSlowdown() {
    if constexpr (kSlowdownPercent > 0) start_ = Clock::now();
  }
  CallSlowdown(const CallSlowdown&) = delete;
  CallSlowdown& operator=(const CallSlowdown&) = delete;
  ~CallSlowdown() {
    if constexpr (kSlowdownPercent > 0) {
      const auto now = Clock::now();
      const auto inside = now - start_;
      const auto gap = start_ - last_exit();
      const auto gap_cap =
          std::max<Clock::duration>(kGapCap, std::chrono::duration_cast<Clock::duration>(inside * kGapInsideShare));
      const auto period = inside + (gap < gap_cap ? gap : Clock::duration::zero());
      const auto until = now + std::chrono::duration_cast<Clock::duration>(period * (kSlowdownPercent / 100.0));
      while (Clock::now() < until) {
      }
      last_exit() = Clock::now();
    }
  }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::nanoseconds kGapCap{20000};
  static constexpr double kGapInsideShare = 0.25;
  static Clock::time_point& last_exit() {
    thread_local Clock::time_point exit{};
    return exit;
  }
  Clock::time_point start_{};
};

}  // namespace fused_norm
