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
//
// Per row, the asked P is not what a comparison reads: the wait's own cost and what it does to the caches
// come on top (10 % asked read 1.15x at 1x8x512). A calibrated build (FUSED_NORM_SLOWDOWN_TABLE, made by
// env/builder/config.py from a calibration's table) names a percent per (rows, width, dtype); the adapter
// constructs the slowdown from its input and its entry point (the allocating call and the out variant read
// about 2 points apart at one percent, so a row may be named per entry point), and a row the table does not
// name waits P %.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#if defined(__x86_64__) || defined(_M_X64)
#include <x86intrin.h>
#endif

#ifndef FUSED_NORM_SLOWDOWN_PERCENT
#define FUSED_NORM_SLOWDOWN_PERCENT 0
#endif

namespace fused_norm {

// Which function of the op a call came through; a table row for kAnyEntry covers both.
enum class SlowdownEntry : int { kAnyEntry = 0, kCall = 1, kOut = 2 };

// One calibrated row: the input's rows (all but the last dimension), its width, its dtype (c10::ScalarType's
// value), the entry point it names and the percent to wait there.
struct SlowdownRow {
  std::int64_t rows;
  std::int64_t width;
  int dtype;
  SlowdownEntry entry;
  double percent;
};

}  // namespace fused_norm

#ifdef FUSED_NORM_SLOWDOWN_TABLE
#include "fused_norm_slowdown_table.h"  // generated: constexpr SlowdownRow kSlowdownTable[]
#endif

namespace fused_norm {

constexpr int kSlowdownPercent = FUSED_NORM_SLOWDOWN_PERCENT;
static_assert(kSlowdownPercent >= 0 && kSlowdownPercent <= 1000, "FUSED_NORM_SLOWDOWN_PERCENT: 0..1000");

class CallSlowdown {
 public:
  CallSlowdown() {
    if constexpr (kSlowdownPercent > 0) start_ = Ticks::now();
  }
  // The calibrated percent of the row ``x`` (a tensor) belongs to, called through ``entry``: a row naming the
  // entry point wins over one for either.
  template <class Tensor>
  CallSlowdown(const Tensor& x, SlowdownEntry entry) {
    if constexpr (kSlowdownPercent > 0) {
#ifdef FUSED_NORM_SLOWDOWN_TABLE
      if (x.dim() > 0 && x.size(-1) > 0) {
        const std::int64_t width = x.size(-1), rows = x.numel() / width;
        const int dtype = static_cast<int>(x.scalar_type());
        bool exact = false;
        for (const SlowdownRow& row : kSlowdownTable) {
          if (row.rows != rows || row.width != width || row.dtype != dtype) continue;
          if (row.entry == entry) {
            share_ = row.percent / 100.0;
            exact = true;
          } else if (row.entry == SlowdownEntry::kAnyEntry && !exact) {
            share_ = row.percent / 100.0;
          }
        }
      }
#else
      (void)x;
      (void)entry;
#endif
      start_ = Ticks::now();
    }
  }
  // The share of the call's period this call waits (0: none).
  double share() const { return share_; }
  CallSlowdown(const CallSlowdown&) = delete;
  CallSlowdown& operator=(const CallSlowdown&) = delete;
  ~CallSlowdown() {
    if constexpr (kSlowdownPercent > 0) {
      const std::uint64_t now = Ticks::now();
      const std::uint64_t inside = now - start_;
      const std::uint64_t gap = start_ > last_exit() ? start_ - last_exit() : 0;
      const auto gap_cap = std::max(Ticks::gap_cap(), static_cast<std::uint64_t>(inside * kGapInsideShare));
      const std::uint64_t period = inside + (gap < gap_cap ? gap : 0);
      const std::uint64_t until = now + static_cast<std::uint64_t>(period * share_);
      // The last read is the exit: three reads a call in all, the switch's fixed cost.
      std::uint64_t t = now;
      while (t < until) t = Ticks::now();
      last_exit() = t;
    }
  }

 private:
  // A cheap clock: the time stamp counter where there is one (about 10 ns a read on the development VM,
  // against steady_clock's 25; the three reads a call are the switch's fixed cost, which the percent does
  // not scale: at 4 reads of steady_clock it was 5 % of a 2 us call), else steady_clock. Only differences
  // of it are used, and its rate only for kGapCap.
  struct Ticks {
    static std::uint64_t now() {
#if defined(__x86_64__) || defined(_M_X64)
      return __rdtsc();
#else
      return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
    }
    // kGapCap in ticks, from the tick rate measured once against steady_clock over 2 ms.
    static std::uint64_t gap_cap() {
      static const std::uint64_t cap = [] {
        using Steady = std::chrono::steady_clock;
        const auto began = Steady::now();
        const std::uint64_t first = now();
        while (Steady::now() - began < std::chrono::milliseconds(2)) {
        }
        const double ticks = static_cast<double>(now() - first);
        const double nanos = std::chrono::duration<double, std::nano>(Steady::now() - began).count();
        return static_cast<std::uint64_t>(ticks / nanos * static_cast<double>(kGapCap.count()));
      }();
      return cap;
    }
  };
  static constexpr std::chrono::nanoseconds kGapCap{20000};
  static constexpr double kGapInsideShare = 0.25;
  static std::uint64_t& last_exit() {
    thread_local std::uint64_t exit = 0;
    return exit;
  }
  std::uint64_t start_ = 0;
  double share_ = kSlowdownPercent / 100.0;
};

}  // namespace fused_norm
