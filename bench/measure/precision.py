"""How precise a row's median is, and when a variant has warmed up: what decides how long a row is timed.

The interval of the median is a moving-block bootstrap over the row's
samples in the order they were taken: consecutive samples are not
independent (a slow stretch of the machine spans many of them), so the
samples are resampled in blocks of about n^(1/3) consecutive ones, which keep
that dependence, and the 2.5th and 97.5th percentiles of the resampled
medians bound the 95 % interval. Past MAX_SERIES samples, consecutive
samples are first averaged in groups (as a timer block of more calls would
have measured them), so an interval costs at most MAX_SERIES x RESAMPLES
values; the interval's distances below and above the series' median are then
set around the samples' own median. A row's samples come from several processes
(rounds); a process's own bias (its buffers' placement, its threads' cores) is
not inside this interval - the comparison of two builds carries it, with one
unit per process (bench/stats/compare.py).

Warm-up ends at a steady state: the median of the last WARMUP_WINDOW calls
within STEADY_TOLERANCE of the window before (the caches, the allocator's
threshold and lazy state have settled), after at least two windows. A variant
timed as one series of single calls (bench/measure/timing.py) finds its steady
state after the fact instead (:func:`settled_start`): the first window of
calls whose median is within STEADY_TOLERANCE of the series' second half.
"""

from __future__ import annotations

import math

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 400  # resampled medians per interval: the percentiles move by < 0.2 % of the width between seeds
PRECISION = 0.02  # default: a row stops when its interval is within +-2 % of its median
PRECISION_FLOOR = 30  # samples before the interval is judged (a bootstrap of fewer says little)
MAX_SERIES = 2048  # samples the bootstrap resamples at most (more are averaged in consecutive groups)
WARMUP_WINDOW = 8  # warm-up calls per window
STEADY_TOLERANCE = 0.05  # two windows' medians this close: the variant is warm


def block_length(n: int) -> int:
    return max(1, round(n ** (1 / 3)))


def median_interval(
    samples: np.ndarray, confidence: float = CONFIDENCE, resamples: int = RESAMPLES
) -> tuple[float, float]:
    """The ``confidence`` interval of the median of ``samples`` (in order), by a moving-block bootstrap."""
    values = np.asarray(samples, dtype=np.float64)
    n = len(values)
    if n == 0:
        raise ValueError("no samples for an interval")
    if n < 3:
        return float(values.min()), float(values.max())
    median = float(np.median(values))
    if n > MAX_SERIES:
        group = math.ceil(n / MAX_SERIES)
        usable = n // group * group
        values = values[:usable].reshape(-1, group).mean(axis=1)
        n = len(values)
    length = block_length(n)
    blocks = math.ceil(n / length)
    rng = np.random.default_rng(n)  # reproducible: the same samples give the same interval
    starts = rng.integers(0, n - length + 1, size=(resamples, blocks))
    index = (starts[:, :, None] + np.arange(length)).reshape(resamples, -1)[:, :n]
    medians = np.median(values[index], axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(medians, [tail, 1 - tail])
    center = float(np.median(values))
    return median - (center - float(low)), median + (float(high) - center)


def half_width(samples: np.ndarray) -> float:
    """Half the interval's width over the median: +- this share of the median."""
    low, high = median_interval(samples)
    median = float(np.median(samples))
    return (high - low) / 2 / median if median > 0 else math.inf


def steady(previous: np.ndarray, last: np.ndarray, tolerance: float = STEADY_TOLERANCE) -> bool:
    """Two consecutive windows of warm-up call times whose medians agree within ``tolerance``."""
    a, b = float(np.median(previous)), float(np.median(last))
    return abs(b - a) <= tolerance * max(a, b)


def settled_start(times: np.ndarray, limit: int | None = None, tolerance: float = STEADY_TOLERANCE) -> int:
    """Calls at the head of ``times`` (in order) before its steady state: the first start of a window whose median
    is within ``tolerance`` of the median of the series' second half, which is the settled level if anything is.

    The window is WARMUP_WINDOW calls, fewer in a short series (a quarter of it, at least one). At most the first
    half is warm-up (and at most ``limit`` calls): a series that never reaches its level within it keeps its
    second half. A head faster than the level is not steady either (a clock boost that fades), so both ways count.
    """
    values = np.asarray(times, dtype=np.float64)
    n = len(values)
    if n < 2:
        return 0
    last = n // 2 if limit is None else min(n // 2, limit)
    level = float(np.median(values[n // 2 :]))
    window = max(1, min(WARMUP_WINDOW, n // 4))
    medians = np.median(np.lib.stride_tricks.sliding_window_view(values, window)[: last + 1], axis=1)
    settled = np.abs(medians - level) <= tolerance * np.maximum(medians, level)
    if not settled.any():
        return last
    start = int(np.argmax(settled))
    # The window's median is settled, but up to half of its first calls need not be: skip those off the level.
    for _ in range(window - 1):
        if start >= last or abs(values[start] - level) <= tolerance * max(values[start], level):
            break
        start += 1
    return start
