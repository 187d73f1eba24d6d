// A deliberate slowdown of the CPU op, for measuring what the benchmark comparisons detect
// (bench/experiments/ab_measure.py). Compiled in only when the build defines
// FUSED_NORM_SLOWDOWN_PERCENT to a positive integer (env/builder/config.py sets it from
// FUSEDBENCH_SLOWDOWN_PERCENT); otherwise FUSED_NORM_INJECTED_WAIT() is nothing.
//
// On leaving a call it busy-waits that percent of the call's period: the time inside the C++
// implementation (checks, allocation, kernel) plus the gap since the previous call left it, which
// back to back is the time Python and the dispatcher take to get from one call into the next, and
// the release of the previous call's output. A gap longer than kGapCap and than kGapInsideShare of
// the inside time is not a call's overhead (the first call of a block, or a model's other layers
// between two norms), so only the inside time counts then: without the share, an allocating call
// whose previous output is unmapped on release is slowed by less than asked. Sized call by call, so
// an op row is that percent slower whatever its shape and the machine's load; a model row by that
// percent of the norms' share of the model.
#pragma once

#if defined(FUSED_NORM_SLOWDOWN_PERCENT) && FUSED_NORM_SLOWDOWN_PERCENT > 0

#include <algorithm>
#include <chrono>

namespace fused_norm_slowdown {

constexpr double kInjectedShare = FUSED_NORM_SLOWDOWN_PERCENT / 100.0;
constexpr std::chrono::nanoseconds kGapCap{20000};
constexpr double kGapInsideShare = 0.25;
using Clock = std::chrono::steady_clock;
inline thread_local Clock::time_point last_exit{};

struct InjectedWait {
  Clock::time_point start = Clock::now();
  ~InjectedWait() {
    const auto now = Clock::now();
    const auto gap = start - last_exit;
    const auto inside = now - start;
    const auto gap_cap =
        std::max<Clock::duration>(kGapCap, std::chrono::duration_cast<Clock::duration>(inside * kGapInsideShare));
    const auto period = inside + (gap < gap_cap ? gap : Clock::duration::zero());
    const auto until = now + std::chrono::duration_cast<std::chrono::nanoseconds>(period * kInjectedShare);
    while (Clock::now() < until) {
    }
    last_exit = Clock::now();
  }
};

}  // namespace fused_norm_slowdown

#define FUSED_NORM_INJECTED_WAIT() const fused_norm_slowdown::InjectedWait fused_norm_injected_wait

#else

#define FUSED_NORM_INJECTED_WAIT() static_cast<void>(0)

#endif
