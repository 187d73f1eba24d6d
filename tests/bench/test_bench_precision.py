"""Precision-driven sampling: the median's interval, the stop once it is narrow, the warm-up's steady state."""

from __future__ import annotations

import time

import numpy as np
import pytest

from bench.measure.precision import MAX_SERIES, PRECISION_FLOOR, WARMUP_WINDOW, half_width, median_interval
from bench.measure.timing import TimingConfig, measure, warm_up


def _spin(us: float) -> None:
    end = time.perf_counter_ns() + us * 1e3
    while time.perf_counter_ns() < end:
        pass


def test_the_interval_covers_the_true_median_about_95_percent_of_the_time():
    # Call times are right-skewed: lognormal, the true median exp(mu). Over 300 fresh draws of 400 samples
    # the 95 % interval should miss it about 15 times; a binomial 99.9 % band is 5..29.
    rng = np.random.default_rng()
    mu = float(rng.uniform(1.0, 5.0))
    misses = 0
    for _ in range(300):
        low, high = median_interval(rng.lognormal(mu, 0.3, 400))
        misses += not low <= np.exp(mu) <= high
    assert 5 <= misses <= 29, misses


def test_the_interval_narrows_as_the_samples_grow_and_keeps_its_median_past_the_series_cap():
    rng = np.random.default_rng()
    values = rng.lognormal(2.0, 0.2, 8 * MAX_SERIES)
    small, large = half_width(values[:300]), half_width(values)
    assert large < small / 3  # about sqrt(54) narrower, at least 3x
    low, high = median_interval(values)
    assert low < np.median(values) < high
    with pytest.raises(ValueError, match="no samples"):
        median_interval(np.array([]))


def test_a_steady_call_stops_once_its_interval_is_narrow_long_before_the_cap():
    config = TimingConfig(warmup=0, budget_s=2.0, min_samples=5, precision=0.02)
    started = time.perf_counter()
    timing = measure(lambda: _spin(200), config, resolution_ns=50.0)
    n = len(timing.samples_us)
    # Judged first at PRECISION_FLOOR samples, then each time they double: it stopped at one of those counts.
    assert n in {PRECISION_FLOOR * 2**k for k in range(10)}, n
    assert half_width(timing.samples_us) <= 0.02
    assert time.perf_counter() - started < 1.0  # far from the 2 s cap (200 µs calls: 0.1 s per 500 samples)


def test_a_noisy_call_runs_to_its_cap_and_its_width_says_so():
    rng = np.random.default_rng()
    draws = iter(rng.lognormal(np.log(100.0), 1.0, 100_000))  # very spread: +-2 % is out of reach in 0.15 s
    config = TimingConfig(warmup=0, budget_s=0.15, min_samples=5, precision=0.02)
    started = time.perf_counter()
    timing = measure(lambda: _spin(next(draws)), config, resolution_ns=50.0)
    assert time.perf_counter() - started >= 0.15
    assert half_width(timing.samples_us) > 0.02


def test_the_warm_up_ends_at_a_steady_state_after_a_slow_start():
    calls = []

    def settling():  # the first calls pay for something once (pages, caches): 10x slower
        calls.append(None)
        _spin(1000 if len(calls) <= 5 else 100)

    config = TimingConfig(warmup=200, budget_s=5.0, steady_warmup=True)
    made = warm_up(settling, config)
    # The first window holds the slow calls; the second and third agree: done after three windows (a few more
    # where a neighbour's load stretched a window on this shared machine), long before the 200-call cap.
    assert 3 * WARMUP_WINDOW <= made == len(calls) <= 6 * WARMUP_WINDOW
    assert 2 * WARMUP_WINDOW <= warm_up(lambda: _spin(50), config) <= 5 * WARMUP_WINDOW  # steady from the start
    assert warm_up(lambda: _spin(50), TimingConfig(warmup=10, steady_warmup=True)) == 10  # the count caps it


def test_a_warm_up_that_never_settles_stops_at_its_share_of_the_budget():
    from bench.measure.timing import STEADY_WARMUP_BUDGET_SHARE

    started = []

    def drifting():  # each call 20 % longer than the last: no two windows agree
        started.append(time.perf_counter())
        _spin(50 * 1.2 ** len(started))

    budget = 0.2
    made = warm_up(drifting, TimingConfig(warmup=10_000, budget_s=budget, steady_warmup=True))
    share = STEADY_WARMUP_BUDGET_SHARE * budget
    elapsed = time.perf_counter() - started[0]
    # The last call started before the deadline, and the warm-up ended once it had passed: at half the budget,
    # not at the whole of it (the last call lasts a few ms at most).
    assert made == len(started) > 2 * WARMUP_WINDOW and started[-1] - started[0] < share
    assert 0.99 * share <= elapsed < 0.75 * budget


def test_a_precision_outside_0_1_is_refused_naming_it():
    with pytest.raises(ValueError, match="precision must be in"):
        TimingConfig(precision=0.0)


def test_the_settled_start_is_where_the_head_reaches_the_second_half_level():
    from bench.measure.precision import settled_start

    rng = np.random.default_rng()
    settled = rng.normal(100.0, 1.0, 200)  # +-1 %: far inside the 5 % tolerance
    assert settled_start(settled) == 0
    # A head of 30 calls that decays from 3x to the level: those more than 5 % off it are the warm-up.
    head = 100.0 * (1 + 2.0 * np.exp(-np.arange(30) / 4.0))
    series = np.concatenate([head, settled])
    start = settled_start(series)
    first_close = int(np.argmax(head < 105.0))
    assert first_close <= start <= first_close + 1, (start, first_close)
    # A head faster than the level (a clock boost that fades) is not steady either.
    assert settled_start(np.concatenate([np.full(20, 80.0), settled])) == 20
    # The limit caps the warm-up; a series that never settles keeps its second half.
    assert settled_start(series, limit=3) == 3
    drifting = 100.0 * 1.1 ** np.arange(40)
    assert settled_start(drifting) == 20
    # Short series: single calls are windows of one.
    assert settled_start(np.array([150.0, 101.0, 99.0, 100.0, 100.5])) == 1
    assert settled_start(np.array([100.0, 101.0, 99.0, 100.0])) == 0
    assert settled_start(np.array([100.0])) == 0


def test_a_steady_series_is_judged_at_the_same_sample_counts_as_a_warmed_up_variant():
    # 200 us calls, steady from the start, against a 2 s cap: judged at 30 settled samples, then 60, 120, ...
    config = TimingConfig(warmup=50, budget_s=2.0, min_samples=5, precision=0.02, steady_warmup=True)
    timing = measure(lambda: _spin(200), config, resolution_ns=50.0)
    n = len(timing.samples_us)
    assert timing.block == 1 and n in {PRECISION_FLOOR * 2**k for k in range(10)}, (n, timing.warmup)
    assert half_width(timing.samples_us) <= 0.02
