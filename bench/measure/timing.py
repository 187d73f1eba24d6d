"""How one call is timed: warm-up, block size, sample count, statistics.

Method on the CPU (the README states it too):
  * warm-up calls are made and thrown away (allocator, caches, lazy init),
    at most for as long as the variant's time budget (at least
    ``MIN_WARMUP_CALLS``): a few calls of a long call warm what fifty warm,
    and fifty 1-second calls would cost a minute per variant. With
    ``steady_warmup`` the warm-up ends earlier, once two consecutive windows
    of calls take the same time (bench/measure/precision.py), after at least
    two windows, or at half the budget;
  * perf_counter_ns around each call; when one call takes less than
    ``BLOCK_FACTOR`` x the measured timer resolution, around a block of calls
    (time / calls per block), so the timer's own cost stays below 1 %. The
    steady warm-up times its calls: where the fastest of them already lasts
    the target, the block is one call with no probe;
  * the garbage collector is off while sampling (a collection inside one
    sample would be charged to whatever op happened to run);
  * a variant whose calls each outlast the block target (with
    ``steady_warmup``; judged on the two calls after the verified one) is
    timed as one series of single calls instead: nothing is thrown away
    before it, its warm-up is the series' head up to its steady state, found
    after the fact (bench/measure/precision.py ``settled_start``), and every
    call from there on is a sample. Its budget holds warm-up and samples
    together, and its floor counts settled samples. A separate warm-up spent
    up to half the budget again on calls that had mostly settled: at
    16x256x2048 and above every variant did, in every process;
  * sampling continues until the time budget is spent AND at least
    ``min_samples`` samples exist, or ``max_samples`` is reached. With
    ``precision`` it also stops, from PRECISION_FLOOR samples on, once the 95 %
    interval of the median is within +-precision of it (checked each time the
    samples have doubled): the budget is then a cap, spent only by rows whose
    interval is still wide.
On a CUDA device the same loop runs with CUDA events instead of the host
clock (:func:`measure_cuda`, explained above it).
"""

from __future__ import annotations

import gc
import math
import resource
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from bench.measure import machine
from bench.measure import turns as bench_turns
from bench.measure.precision import (
    PRECISION_FLOOR,
    WARMUP_WINDOW,
    half_width,
    median_interval,
    settled_start,
    steady,
)

# A block must last at least this many timer resolutions: <= 1 % timer error.
BLOCK_FACTOR = 100
# Extra timings of the block probe's batch; the fastest sets the block.
BLOCK_PROBE_REPEATS = 4
# The steady-state warm-up stops at this share of the variant's budget (after the minimum): past the minimum,
# warm-up calls of 10-700 ms read as the settled calls do (reports/mainjob/warmup_curve/), so a longer warm-up buys
# nothing where a steady state takes two windows of such calls.
STEADY_WARMUP_BUDGET_SHARE = 0.5
# Calls made before timing even when one call outlasts the budget: the first touches
# the output's pages and lazy state, the next one runs on warm caches. Calls the
# caller already made (``TimingConfig.calls_before``: the run's verified call)
# count towards them. Two: at 32x512x4096 (reports/mainjob/warmup_curve/) the first
# call after the verified one still reads up to 1.34x its settled time (ONNX Runtime's
# standard routes), and every later call reads as a settled one (90th percentile
# 1.04-1.07 at calls 2-5, 1.06 at calls 7-12), so a third call was a settled call
# thrown away: one call of each variant longer than its warm-up budget, per process.
MIN_WARMUP_CALLS = 2


@dataclass(frozen=True)
class TimingConfig:
    warmup: int = 50
    budget_s: float = 1.0
    min_samples: int = 20
    max_samples: int = 20_000
    precision: float | None = None  # stop once the median's interval is within +-precision of it (a share)
    steady_warmup: bool = False  # end the warm-up at a steady state rather than after ``warmup`` calls
    calls_before: int = 0  # calls of ``call`` the caller made just before (its verification): warm-up's first

    @property
    def min_warmup(self) -> int:
        """Warm-up calls made even past the budget: MIN_WARMUP_CALLS less the calls made before."""
        return max(0, MIN_WARMUP_CALLS - self.calls_before)

    def __post_init__(self) -> None:
        if self.precision is not None and not 0 < self.precision < 1:
            raise ValueError(f"precision must be in (0, 1) (a share of the median), got {self.precision}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0 calls, got {self.warmup}")
        if not self.budget_s > 0:
            raise ValueError(f"budget_s must be > 0 seconds, got {self.budget_s}")
        if self.calls_before < 0:
            raise ValueError(f"calls_before must be >= 0 calls, got {self.calls_before}")
        if not 1 <= self.min_samples <= self.max_samples:
            raise ValueError(f"need 1 <= min_samples ({self.min_samples}) <= max_samples ({self.max_samples})")


@dataclass(frozen=True)
class Timing:
    samples_us: np.ndarray  # per-call microseconds, one value per timed sample
    block: int
    warmup: int
    other_cpu_s: float = float("nan")  # CPU seconds other processes used while sampling (bench/measure/machine.py)
    wall_s: float = 0.0  # wall time of the sampling loop
    minor_faults: int = 0  # page faults this process took while sampling (bench/measure/machine.py)
    calls: int = 0  # calls made while sampling (samples x block)
    sync_us: float = float("nan")  # the core-placement probe around the sampling (bench/measure/core_sync.py)

    @property
    def minor_faults_per_call(self) -> float:
        return self.minor_faults / self.calls if self.calls else math.nan

    @classmethod
    def sampled(cls, samples_us: np.ndarray, block: int, warmup: int, before, after, calls_per_call: int = 1) -> Timing:
        """A timing whose machine load is read from snapshots before and after its sampling loop.

        ``calls_per_call``: calls each call of the sampled callable makes (a CUDA graph replays several), so
        that faults per call are per call of the op, not per replay.
        """
        return cls(
            samples_us,
            block,
            warmup,
            other_cpu_s=machine.other_cpu_seconds(before, after),
            wall_s=after.wall_s - before.wall_s,
            minor_faults=machine.minor_faults(before, after),
            calls=len(samples_us) * block * calls_per_call,
        )


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
    median_lo_us: float  # the 95 % interval of the median (bench/measure/precision.py)
    median_hi_us: float


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
    One batch can be stretched by an interrupt or a page fault, which would make
    the block too short and the timer's share of every sample larger; so the
    batch found is timed BLOCK_PROBE_REPEATS times more and the fastest counts.
    """
    target_ns = BLOCK_FACTOR * resolution_ns
    calls = 1
    while True:
        elapsed = _time_batch(call, calls)
        if elapsed >= target_ns:
            break
        calls *= 2
    if calls == 1:
        return 1
    fastest = min([elapsed] + [_time_batch(call, calls) for _ in range(BLOCK_PROBE_REPEATS)])
    return math.ceil(target_ns / (max(fastest, 1) / calls))


def _time_batch(call: Callable[[], object], calls: int) -> int:
    start = time.perf_counter_ns()
    for _ in range(calls):
        call()
    return time.perf_counter_ns() - start


def warm_up(call: Callable[[], object], config: TimingConfig, sync: Callable[[], object] | None = None) -> int:
    """Make up to ``config.warmup`` untimed calls, stopping once they have taken ``config.budget_s``
    (never before ``config.min_warmup``); return the calls made. ``sync`` waits for queued device work,
    so that the time read is the calls' own. With ``config.steady_warmup`` (host clock only), stop at
    the steady state too."""
    return warm_up_timed(call, config, sync)[0]


def warm_up_timed(
    call: Callable[[], object], config: TimingConfig, sync: Callable[[], object] | None = None
) -> tuple[int, float]:
    """:func:`warm_up`, and the fastest warm-up call in ns where they were timed one by one (0 where not)."""
    if config.steady_warmup and sync is None:
        return _warm_up_to_steady_state(call, config)
    deadline = time.perf_counter_ns() + config.budget_s * 1e9
    for made in range(config.warmup):
        if made >= config.min_warmup:
            if sync is not None:
                sync()
            if time.perf_counter_ns() >= deadline:
                return made, 0.0
        call()
    return config.warmup, 0.0


def _warm_up_to_steady_state(call: Callable[[], object], config: TimingConfig) -> tuple[int, float]:
    """Timed warm-up calls in windows of WARMUP_WINDOW: stop when two consecutive windows agree (after at least
    two), at ``config.warmup`` calls, or once the calls have taken STEADY_WARMUP_BUDGET_SHARE of
    ``config.budget_s`` (after ``min_warmup``). Returns the calls made and the fastest of them in ns (0 when
    none was made)."""
    clock = time.perf_counter_ns
    deadline = clock() + STEADY_WARMUP_BUDGET_SHARE * config.budget_s * 1e9
    times = np.empty(max(config.warmup, 1), dtype=np.float64)
    made = 0
    while made < config.warmup:
        if made >= config.min_warmup and clock() >= deadline:
            break
        if made >= 2 * WARMUP_WINDOW and made % WARMUP_WINDOW == 0:
            if steady(times[made - 2 * WARMUP_WINDOW : made - WARMUP_WINDOW], times[made - WARMUP_WINDOW : made]):
                break
        start = clock()
        call()
        times[made] = clock() - start
        made += 1
    return made, float(times[:made].min()) if made else 0.0


# Calls timed to choose between a series and a warm-up followed by blocks: a first call can still run cold.
SERIES_PROBE_CALLS = 2


class _TurnsInLoop:
    """The other process's turns taken inside one timed loop (an A/B worker's; elsewhere none is due). A turn's
    wait is neither the loop's budget nor load on it, and the first call after it is not timed: the other
    process's turn left its own data in the caches."""

    def __init__(self, call: Callable[[], object]) -> None:
        self._turns = bench_turns.current()
        self._call = call
        self._waited_ns = 0
        self._busy_while_waiting_s = 0.0

    def pass_if_due(self) -> int:
        """Hand the CPU over if the turn is due: the ns waited for it to come back (0 where the turn goes on)."""
        pause = self._turns.pass_if_due()
        if pause is None:
            return 0
        self._waited_ns += pause.waited_ns
        self._busy_while_waiting_s += pause.busy_s
        self._call()
        return pause.waited_ns

    def snapshot(self) -> machine.CpuSnapshot:
        """The machine's CPU use now, less the waits and what the other process used during them."""
        return machine.without_pauses(machine.snapshot(), self._waited_ns / 1e9, self._busy_while_waiting_s)


def measure(call: Callable[[], object], config: TimingConfig, resolution_ns: float, block: int | None = None) -> Timing:
    """Warm up, then sample ``call`` per the method above. ``call`` is already verified.

    ``block`` fixes the calls per sample (later rounds reuse the first round's).
    """
    probed = 0
    if config.steady_warmup and block in (None, 1):
        series = measure_series(call, config, BLOCK_FACTOR * resolution_ns, known_long=block == 1)
        if isinstance(series, Timing):
            return series
        probed = series  # calls too short for a series: they count as warm-up calls made
        config = replace(config, calls_before=config.calls_before + probed)
    warmed, fastest_ns = warm_up_timed(call, config)
    warmed += probed
    if block is None:
        # Every timed warm-up call alone outlasted the block's target: one call a sample, and no probe (whose
        # one call costs 0.1-0.6 s a variant at 32x512x4096).
        block = 1 if fastest_ns >= BLOCK_FACTOR * resolution_ns else block_size(call, resolution_ns)
    samples = np.empty(config.max_samples, dtype=np.float64)
    budget_ns = config.budget_s * 1e9
    clock = time.perf_counter_ns
    n = 0
    next_check = max(config.min_samples, PRECISION_FLOOR)  # when the interval is judged next (precision only)
    turns = _TurnsInLoop(call)
    with gc_disabled():
        cpu_before = machine.snapshot()
        began = clock()
        while n < config.max_samples and (n < config.min_samples or clock() - began < budget_ns):
            began += turns.pass_if_due()
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
            if config.precision is not None and n >= next_check:
                if half_width(samples[:n]) <= config.precision:
                    break
                next_check = 2 * n  # the interval's cost grows with n: judge it as the samples double
        cpu_after = turns.snapshot()
    return Timing.sampled(samples[:n] / 1e3, block, warmed, cpu_before, cpu_after)


def measure_series(
    call: Callable[[], object], config: TimingConfig, min_call_ns: float, known_long: bool = False
) -> Timing | int:
    """Time ``call`` as one series of single calls whose head up to its steady state is the warm-up (see above).

    Unless ``known_long`` (an earlier round's block was one call), the first SERIES_PROBE_CALLS calls decide: if
    the faster of them, or the settled median at the end, is under ``min_call_ns`` (the block target), the timer's
    share of a single call is too large, and the calls made are returned (as warm-up made) for a warm-up and
    blocks. The budget holds the whole series; the sample floor counts calls past the warm-up.
    """
    clock = time.perf_counter_ns
    capacity = config.max_samples + config.warmup
    times = np.empty(capacity, dtype=np.float64)
    faults = np.empty(capacity + 1, dtype=np.int64)  # this process's minor faults before each call, and at the end
    budget_ns = config.budget_s * 1e9
    next_check = max(config.min_samples, PRECISION_FLOOR)  # settled samples when the interval is judged next
    look_at = next_check  # calls at which the settled samples are counted next
    turns = _TurnsInLoop(call)
    n, start = 0, 0
    with gc_disabled():
        cpu_before = machine.snapshot()
        began = clock()
        while n < capacity:
            if not known_long and n == SERIES_PROBE_CALLS and times[:n].min() < min_call_ns:
                return n
            spent = clock() - began >= budget_ns
            due = config.precision is not None and n >= look_at
            if n >= SERIES_PROBE_CALLS and (spent or due):
                start = settled_start(times[:n], config.warmup)
                if spent and n - start >= config.min_samples:
                    break
                if due:
                    # Judged as the settled samples double, as a warmed-up variant's samples are.
                    if n - start >= next_check:
                        if half_width(times[start:n]) <= config.precision:
                            break
                        next_check = 2 * (n - start)
                    look_at = start + next_check  # the earliest the settled samples can reach it
            began += turns.pass_if_due()
            faults[n] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t0 = clock()
            call()
            times[n] = clock() - t0
            n += 1
        faults[n] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        cpu_after = turns.snapshot()
    start = settled_start(times[:n], config.warmup)
    samples = times[start:n][: config.max_samples]
    if not known_long and float(np.median(samples)) < min_call_ns:
        return n  # its first calls ran cold and long; settled, it needs blocks
    return Timing(
        samples / 1e3,
        block=1,
        warmup=start,
        other_cpu_s=machine.other_cpu_seconds(cpu_before, cpu_after),
        wall_s=cpu_after.wall_s - cpu_before.wall_s,
        minor_faults=int(faults[start + len(samples)] - faults[start]),  # the warm-up's faults are not the op's
        calls=len(samples),
    )


def summarize(samples_us: np.ndarray) -> Summary:
    if len(samples_us) == 0:
        raise ValueError("no samples to summarize")
    p25, p50, p75, p90, p99 = np.percentile(samples_us, [25, 50, 75, 90, 99])
    low, high = median_interval(samples_us)
    return Summary(
        n=len(samples_us),
        min_us=float(samples_us.min()),
        median_us=float(p50),
        p90_us=float(p90),
        p99_us=float(p99),
        mean_us=float(samples_us.mean()),
        std_us=float(samples_us.std(ddof=1)) if len(samples_us) > 1 else 0.0,
        iqr_us=float(p75 - p25),
        median_lo_us=low,
        median_hi_us=high,
    )


# --- CUDA -----------------------------------------------------------------------------------
#
# On a GPU the host clock would time the launch, not the work: a kernel runs
# asynchronously. So CUDA rows are timed with CUDA events recorded on the
# current stream around a block of calls; events resolve about 0.5 us, so a
# block lasts at least CUDA_SAMPLE_TARGET_US. Samples are collected
# SAMPLES_PER_SYNC at a time between synchronisations, so the device never
# waits for the host between the calls of a sample. With an L2 flush, a buffer
# twice the L2 size is overwritten before every sample and each sample is one
# call: the call then starts from a cold L2, as after other work in a model.

CUDA_SAMPLE_TARGET_US = 50.0
SAMPLES_PER_SYNC = 16
MAX_CUDA_BLOCK = 1000
GRAPH_CALLS = 20  # calls captured in one CUDA graph; a replay's time / GRAPH_CALLS is the per-call time


class EventClock(Protocol):
    """What the CUDA timer needs from the device: timing events and a synchronisation."""

    def event(self) -> Any: ...  # an object with record() and elapsed_time(other) -> milliseconds

    def synchronize(self) -> None: ...


class CudaEventClock:
    def event(self) -> Any:
        import torch

        return torch.cuda.Event(enable_timing=True)

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()


class L2Flush:
    """Overwrites a buffer of twice the device's L2 size: whatever a call left in L2 is evicted."""

    def __init__(self, device: str = "cuda") -> None:
        import torch

        self.l2_bytes = int(torch.cuda.get_device_properties(torch.device(device)).L2_cache_size)
        self._buffer = torch.empty(2 * self.l2_bytes, dtype=torch.uint8, device=device)

    def __call__(self) -> None:
        self._buffer.zero_()


def cuda_block_size(call: Callable[[], object], clock: EventClock) -> int:
    """Calls per sample so that one sample lasts at least CUDA_SAMPLE_TARGET_US (event resolution <= 1 %)."""
    calls = 1
    while True:
        start, end = clock.event(), clock.event()
        start.record()
        for _ in range(calls):
            call()
        end.record()
        clock.synchronize()
        elapsed_us = start.elapsed_time(end) * 1e3
        if elapsed_us >= CUDA_SAMPLE_TARGET_US or calls >= MAX_CUDA_BLOCK:
            break
        calls *= 2
    per_call_us = max(elapsed_us / calls, 1e-3)  # an event pair can read 0 for empty work
    return 1 if calls == 1 else min(MAX_CUDA_BLOCK, math.ceil(CUDA_SAMPLE_TARGET_US / per_call_us))


def measure_cuda(
    call: Callable[[], object],
    config: TimingConfig,
    block: int | None = None,
    flush: Callable[[], None] | None = None,
    calls_per_call: int = 1,
    clock: EventClock | None = None,
) -> Timing:
    """Warm up, then sample ``call`` with CUDA events (see above). ``call`` is already verified.

    ``flush`` (an :class:`L2Flush`) runs before every sample, which then holds
    one call; ``calls_per_call`` divides the time when one call runs several
    (a graph replay of GRAPH_CALLS captured calls).
    """
    clock = clock or CudaEventClock()
    warmed = warm_up(call, config, sync=clock.synchronize)
    clock.synchronize()
    block = 1 if flush is not None else (block or cuda_block_size(call, clock))
    samples: list[float] = []
    budget_ns = config.budget_s * 1e9
    with gc_disabled():
        cpu_before = machine.snapshot()
        began = time.perf_counter_ns()
        while len(samples) < config.max_samples and (
            len(samples) < config.min_samples or time.perf_counter_ns() - began < budget_ns
        ):
            events = []
            for _ in range(SAMPLES_PER_SYNC):
                if flush is not None:
                    flush()
                start, end = clock.event(), clock.event()
                start.record()
                for _ in range(block):
                    call()
                end.record()
                events.append((start, end))
            clock.synchronize()
            samples += [start.elapsed_time(end) * 1e3 / (block * calls_per_call) for start, end in events]
        cpu_after = machine.snapshot()
    samples_us = np.asarray(samples[: config.max_samples], dtype=np.float64)
    return Timing.sampled(samples_us, block, warmed, cpu_before, cpu_after, calls_per_call)


def capture_cuda_graph(
    call: Callable[[], object], calls: int = GRAPH_CALLS, poison: bool = True
) -> Callable[[], object]:
    """``calls`` calls of ``call`` captured in one CUDA graph; returns a replay that returns the last call's output.

    The call is warmed up on a side stream first (lazy initialisation and
    allocations must not happen during capture, as torch's CUDA graph docs say).
    """
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            output = call()
    if poison and isinstance(output, torch.Tensor):
        output.fill_(float("nan"))  # verification then proves the replay wrote every element

    def replay() -> object:
        graph.replay()
        return output

    return replay
