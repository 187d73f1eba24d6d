"""bench/measure/timing.py: warm-up, blocks, sample counts, gc off, statistics."""

from __future__ import annotations

import gc
import time
from dataclasses import replace

import numpy as np
import pytest

from bench.measure import turns as bench_turns
from bench.measure.timing import (
    BLOCK_FACTOR,
    MIN_WARMUP_CALLS,
    TimingConfig,
    block_size,
    measure,
    summarize,
    timer_resolution_ns,
    warm_up,
)

# These tests time busy-wait calls of 10 us to 12 ms and judge the loop's choices on them (block, warm-up, count):
# a test beside them on a 2-CPU machine stretches those calls (a preempted first probe call became the block, a
# series fit 25 calls in its budget instead of 30), so they run in the timed pass, alone.
pytestmark = pytest.mark.timed


def test_timer_resolution_is_measured_and_small():
    resolution = timer_resolution_ns()
    # perf_counter_ns on Linux: tens of ns; anything near a microsecond would make per-call timing useless.
    assert 0 < resolution < 5_000


def test_fast_calls_are_timed_in_blocks_and_slow_calls_one_by_one():
    resolution = timer_resolution_ns()
    fast = measure(lambda: None, TimingConfig(warmup=5, budget_s=0.02), resolution)
    assert fast.block > 1
    # The block lasts at least BLOCK_FACTOR resolutions (within the jitter of the probe).
    assert fast.block * np.median(fast.samples_us) * 1e3 >= 0.5 * BLOCK_FACTOR * resolution

    def slow():
        end = time.perf_counter_ns() + 200_000  # 200 us, far above the resolution
        while time.perf_counter_ns() < end:
            pass

    timing = measure(slow, TimingConfig(warmup=1, budget_s=0.01, min_samples=5), resolution)
    assert timing.block == 1
    assert np.all(timing.samples_us >= 200.0)


def _spin(microseconds: float) -> None:
    end = time.perf_counter_ns() + int(microseconds * 1e3)
    while time.perf_counter_ns() < end:
        pass


def test_a_stretched_probe_batch_does_not_shorten_the_block():
    # 10 us calls against a 50 us block target; the 3rd call of the probe (the first
    # of its 2-call batch) is held up for 400 us, as an interrupt would. Judged on
    # that batch alone, a call would seem to take 205 us and the block would be 1.
    made = []

    def call():
        made.append(1)
        _spin(400.0 if len(made) == 3 else 10.0)

    for _ in range(3):  # warm, as measure() does before probing: a first call runs cold
        call()
    made.clear()
    block = block_size(call, resolution_ns=500.0)
    assert 4 <= block <= 5  # 50 us / (10 us + the loop's own cost)


def test_warm_up_of_long_calls_stops_at_the_budget_but_never_below_the_minimum():
    calls = []

    def long_call():  # 4 ms: 50 of them would take 0.2 s against a 2 ms budget
        calls.append(1)
        _spin(4_000)

    made = warm_up(long_call, TimingConfig(warmup=50, budget_s=0.002))
    assert made == len(calls)
    # The minimum already outlasts the budget, so the deadline stops it right there.
    assert made == MIN_WARMUP_CALLS
    calls.clear()
    timing = measure(long_call, TimingConfig(warmup=50, budget_s=0.002, min_samples=2), resolution_ns=50.0)
    assert timing.warmup == MIN_WARMUP_CALLS  # the report records the calls made, not the number asked
    assert len(calls) == MIN_WARMUP_CALLS + 1 + len(timing.samples_us)  # + the block probe's single call


def test_a_steady_warm_up_whose_calls_outlast_the_block_target_sets_the_block_with_no_probe():
    calls = []

    def long_call():  # 1 ms, against a block target of 100 x 50 ns = 5 us
        calls.append(1)
        _spin(1_000)

    config = TimingConfig(warmup=50, budget_s=0.004, min_samples=3, steady_warmup=True)
    timing = measure(long_call, config, resolution_ns=50.0)
    assert timing.block == 1
    assert len(calls) == timing.warmup + len(timing.samples_us)  # no probe call between warm-up and samples
    # A call shorter than the target still gets its block probed: blocks of several calls.
    calls.clear()
    short = measure(lambda: calls.append(1), replace(config, budget_s=0.002), resolution_ns=5_000.0)
    assert short.block > 1 and len(calls) > short.warmup + short.block * len(short.samples_us)


def test_calls_made_before_count_towards_the_minimum_warm_up():
    calls = []

    def long_call():  # 4 ms against a 1 ms budget: the minimum decides
        calls.append(1)
        _spin(4_000)

    for before in (0, 1, 3, 5):
        calls.clear()
        config = TimingConfig(warmup=50, budget_s=0.001, calls_before=before, steady_warmup=before % 2 == 1)
        # The minimum less the calls before; at least the one call the budget starts before it is spent.
        assert warm_up(long_call, config) == len(calls) == max(1, MIN_WARMUP_CALLS - before)
    with pytest.raises(ValueError, match="calls_before"):
        TimingConfig(calls_before=-1)


def test_warm_up_of_short_calls_makes_every_call_asked():
    calls = []
    assert warm_up(lambda: calls.append(_spin(20)), TimingConfig(warmup=50, budget_s=0.5)) == 50 == len(calls)
    assert warm_up(lambda: None, TimingConfig(warmup=2, budget_s=1e-9)) == 2  # fewer asked than the minimum
    assert warm_up(lambda: None, TimingConfig(warmup=0)) == 0


def test_warmup_budget_and_sample_limits_are_honoured():
    calls = []
    config = TimingConfig(warmup=7, budget_s=0.005, min_samples=30, max_samples=40)

    def call():
        calls.append(gc.isenabled())
        end = time.perf_counter_ns() + 20_000
        while time.perf_counter_ns() < end:
            pass

    timing = measure(call, config, resolution_ns=50.0)
    assert timing.warmup == 7 and timing.block == 1
    # 0.005 s / 20 us = ~250 calls wanted, but max_samples caps; min_samples is reached even past the budget.
    assert 30 <= len(timing.samples_us) <= 40
    assert len(calls) == 7 + 1 + len(timing.samples_us)  # warm-up, one block-size probe (20 us > 100 x 50 ns), samples
    # gc is on for warm-up and the probe, off for every timed sample.
    assert all(calls[:8]) and not any(calls[8:])
    assert gc.isenabled()


def test_min_samples_are_taken_even_when_the_budget_is_spent():
    timing = measure(
        lambda: time.sleep(0.002), TimingConfig(warmup=0, budget_s=0.001, min_samples=4), resolution_ns=50.0
    )
    assert len(timing.samples_us) == 4


def test_summary_matches_numpy(generator):
    import torch

    samples = torch.empty(1001, dtype=torch.float64).log_normal_(1.0, 0.5, generator=generator).numpy()
    s = summarize(samples)
    assert s.n == 1001
    assert s.min_us == samples.min() and s.median_us == pytest.approx(np.median(samples))
    assert s.p90_us == pytest.approx(np.quantile(samples, 0.9)) and s.p99_us == pytest.approx(
        np.quantile(samples, 0.99)
    )
    assert s.mean_us == pytest.approx(samples.mean()) and s.std_us == pytest.approx(samples.std(ddof=1))
    assert s.iqr_us == pytest.approx(np.quantile(samples, 0.75) - np.quantile(samples, 0.25))


@pytest.mark.parametrize(
    "kwargs, message",
    [({"warmup": -1}, "warmup"), ({"budget_s": 0}, "budget_s"), ({"min_samples": 10, "max_samples": 5}, "min_samples")],
)
def test_bad_timing_config_is_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TimingConfig(**kwargs)


@pytest.mark.parametrize("series", [False, True], ids=["warm-up and blocks", "series"])
def test_turns_handed_over_are_neither_budget_nor_load(monkeypatch, series):
    # A stand-in for the other build's turn: 20 ms of sleep. A timed loop of 30 ms in 5 ms turns waits
    # about 5 times; its budget counts only its own turns, and the waits are not load on its samples.
    waits = []
    turns = bench_turns.Turns(lambda: waits.append(time.sleep(0.02)), turn_s=0.005)
    calls = []
    monkeypatch.setattr(bench_turns, "_current", turns)
    started = time.perf_counter()
    # 0.5 ms a call outlasts the block target (100 x 50 ns): with the steady warm-up, the calls are one series,
    # and its budget, not its floor of samples, ends it.
    config = TimingConfig(warmup=50, budget_s=0.03, min_samples=3, steady_warmup=True) if series else None
    config = config or TimingConfig(warmup=0, budget_s=0.03)
    timing = measure(lambda: calls.append(time.sleep(0.0005)), config, 50.0)
    wall = time.perf_counter() - started
    assert turns.handoffs == len(waits) >= 4
    assert wall >= 0.03 + 0.02 * len(waits)  # it timed its whole budget besides the waits
    assert timing.wall_s < 0.03 + 0.015  # the waits are not in the loop's own wall time
    # One untimed call after each turn comes back; the blocks' sizing takes one more, the series' warm-up its head.
    assert len(calls) == len(timing.samples_us) + len(waits) + (timing.warmup if series else 1)
    assert timing.block == 1 or not series
    assert np.median(timing.samples_us) < 5000  # no sample spans a wait


def test_every_turn_starts_on_the_timing_cpu(monkeypatch):
    # Both builds' threads start each turn on the same CPU, so a pair is not split over two CPUs' speeds.
    events = []
    monkeypatch.setattr(bench_turns, "move_to_timing_cpu", lambda: events.append("moved"))
    turns = bench_turns.Turns(lambda: events.append("waited"), turn_s=0.0)
    turns.begin()
    assert events == ["waited", "moved"]
    assert turns.pass_if_due() is not None
    assert events == ["waited", "moved"] * 2


def test_no_turns_are_taken_outside_an_ab_worker():
    assert bench_turns.current() is bench_turns.NO_TURNS and bench_turns.NO_TURNS.pass_if_due() is None


def test_long_calls_are_one_series_whose_slow_head_is_the_warm_up():
    calls = []

    def settling():  # 1 ms calls, the first four 3 ms: the allocator and caches settling
        calls.append(1)
        _spin(3_000 if len(calls) <= 4 else 1_000)

    config = TimingConfig(warmup=50, budget_s=0.05, min_samples=5, steady_warmup=True)
    timing = measure(settling, config, resolution_ns=50.0)
    # Every call after the head is a sample: no warm-up thrown away beyond it, no block probe. (A call stretched by
    # a neighbour's load right after the slow ones may join the head.)
    assert timing.block == 1 and 4 <= timing.warmup <= 8
    assert len(calls) == timing.warmup + len(timing.samples_us) == timing.calls + timing.warmup
    assert np.median(timing.samples_us) < 1_500 and len(timing.samples_us) >= 30
    # The budget holds warm-up and samples together: about 50 calls in 0.05 s, where a separate warm-up of half
    # the budget before 0.05 s of samples made about 75.
    assert timing.wall_s >= 0.05 and len(calls) <= 60


def test_a_series_takes_its_floor_of_settled_samples_past_the_budget():
    calls = []

    def call():  # 4 ms calls against a 1 ms budget, the first one slow
        calls.append(1)
        _spin(12_000 if len(calls) == 1 else 4_000)

    config = TimingConfig(warmup=50, budget_s=0.001, min_samples=3, steady_warmup=True)
    timing = measure(call, config, resolution_ns=50.0)
    # The slow first call is the warm-up (with any call a neighbour's load stretched right after it).
    assert timing.warmup >= 1 and len(timing.samples_us) == 3 and len(calls) == timing.warmup + 3
    assert np.all(timing.samples_us < 8_000)


def test_a_series_counts_the_faults_of_its_samples_not_of_its_warm_up():
    calls = []

    def call():  # the first three calls touch 8 MiB of fresh pages (2048 faults each), later ones none
        calls.append(np.ones(1 << 21, dtype=np.float32) if len(calls) < 3 else None)
        _spin(2_000)

    config = TimingConfig(warmup=50, budget_s=0.03, min_samples=5, steady_warmup=True)
    timing = measure(call, config, resolution_ns=50.0)
    assert timing.warmup >= 3  # slowed by their faults
    assert timing.minor_faults_per_call < 50, timing.minor_faults_per_call


def test_calls_that_settle_below_the_block_target_leave_the_series_for_blocks():
    calls = []

    def call():  # two cold calls of 2 ms, then 1 us: under a 100 x 50 ns = 5 us block target
        calls.append(1)
        _spin(2_000 if len(calls) <= 2 else 1)

    config = TimingConfig(warmup=50, budget_s=0.01, min_samples=5, steady_warmup=True)
    timing = measure(call, config, resolution_ns=50.0)
    assert timing.block > 1 and timing.warmup >= 2  # the probe's calls count as warm-up made
    assert np.median(timing.samples_us) < 50
