"""How one call is timed: warm-up, block size, sample count, statistics.

Method (the README states it too):
  * warm-up calls are made and thrown away (allocator, caches, lazy init);
  * perf_counter_ns around each call; when one call takes less than
    ``BLOCK_FACTOR`` x the measured timer resolution, around a block of calls
    (time / calls per block), so the timer's own cost stays below 1 %;
  * the garbage collector is off while sampling (a collection inside one
    sample would be charged to whatever op happened to run);
  * sampling continues until the time budget is spent AND at least
    ``min_samples`` samples exist, or ``max_samples`` is reached.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from bench import machine

# A block must last at least this many timer resolutions: <= 1 % timer error.
BLOCK_FACTOR = 100


@dataclass(frozen=True)
class TimingConfig:
    warmup: int = 50
    budget_s: float = 1.0
    min_samples: int = 20
    max_samples: int = 20_000

    def __post_init__(self) -> None:
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0 calls, got {self.warmup}")
        if not self.budget_s > 0:
            raise ValueError(f"budget_s must be > 0 seconds, got {self.budget_s}")
        if not 1 <= self.min_samples <= self.max_samples:
            raise ValueError(f"need 1 <= min_samples ({self.min_samples}) <= max_samples ({self.max_samples})")


@dataclass(frozen=True)
class Timing:
    samples_us: np.ndarray  # per-call microseconds, one value per timed sample
    block: int
    warmup: int
    other_cpu_s: float = float("nan")  # CPU seconds other processes used while sampling (bench/machine.py)
    wall_s: float = 0.0  # wall time of the sampling loop
    minor_faults: int = 0  # page faults this process took while sampling (bench/machine.py)
    calls: int = 0  # calls made while sampling (samples x block)

    @property
    def minor_faults_per_call(self) -> float:
        return self.minor_faults / self.calls if self.calls else math.nan


@dataclass(frozen=True)
class Summary:
    n: int
    min_us: float
    median_us: float
    p90_us: float
    p99_us: float
    mean_us: float
    std_us: float
    iqr_us: float


def timer_resolution_ns(trials: int = 2000) -> float:
    """Smallest step perf_counter_ns can resolve, including the cost of reading it.

    Median over ``trials`` of the first non-zero difference between back-to-back
    reads: what a measurement of an empty call would see.
    """
    steps = np.empty(trials)
    for i in range(trials):
        start = time.perf_counter_ns()
        now = time.perf_counter_ns()
        while now == start:
            now = time.perf_counter_ns()
        steps[i] = now - start
    return float(np.median(steps))


@contextmanager
def gc_disabled() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.collect()  # start clean, so the garbage of earlier cases is not freed inside a sample
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def block_size(call: Callable[[], object], resolution_ns: float) -> int:
    """Calls per sample: 1 unless a call is shorter than BLOCK_FACTOR timer resolutions.

    Probes like timeit's autorange: time 1, 2, 4, ... calls until a batch lasts
    the target, so the timer's own cost does not inflate the per-call estimate.
    """
    target_ns = BLOCK_FACTOR * resolution_ns
    calls = 1
    while True:
        start = time.perf_counter_ns()
        for _ in range(calls):
            call()
        elapsed = time.perf_counter_ns() - start
        if elapsed >= target_ns:
            break
        calls *= 2
    return 1 if calls == 1 else math.ceil(target_ns / (elapsed / calls))


def measure(call: Callable[[], object], config: TimingConfig, resolution_ns: float, block: int | None = None) -> Timing:
    """Warm up, then sample ``call`` per the method above. ``call`` is already verified.

    ``block`` fixes the calls per sample (later rounds reuse the first round's).
    """
    for _ in range(config.warmup):
        call()
    block = block or block_size(call, resolution_ns)
    samples = np.empty(config.max_samples, dtype=np.float64)
    budget_ns = config.budget_s * 1e9
    clock = time.perf_counter_ns
    n = 0
    with gc_disabled():
        cpu_before = machine.snapshot()
        began = clock()
        while n < config.max_samples and (n < config.min_samples or clock() - began < budget_ns):
            if block == 1:
                start = clock()
                call()
                samples[n] = clock() - start
            else:
                start = clock()
                for _ in range(block):
                    call()
                samples[n] = (clock() - start) / block
            n += 1
        cpu_after = machine.snapshot()
    return Timing(
        samples_us=samples[:n] / 1e3,
        block=block,
        warmup=config.warmup,
        other_cpu_s=machine.other_cpu_seconds(cpu_before, cpu_after),
        wall_s=cpu_after.wall_s - cpu_before.wall_s,
        minor_faults=machine.minor_faults(cpu_before, cpu_after),
        calls=n * block,
    )


def summarize(samples_us: np.ndarray) -> Summary:
    if len(samples_us) == 0:
        raise ValueError("no samples to summarize")
    p25, p50, p75, p90, p99 = np.percentile(samples_us, [25, 50, 75, 90, 99])
    return Summary(
        n=len(samples_us),
        min_us=float(samples_us.min()),
        median_us=float(p50),
        p90_us=float(p90),
        p99_us=float(p99),
        mean_us=float(samples_us.mean()),
        std_us=float(samples_us.std(ddof=1)) if len(samples_us) > 1 else 0.0,
        iqr_us=float(p75 - p25),
    )
