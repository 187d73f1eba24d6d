"""Level shifts in each row's series of medians over the runs of one machine and run options.

Binary segmentation (Scott and Knott 1974; Vostrikova 1981) splits a series
where one change lowers the squared deviations from the segments' means the
most, keeps the split if that gain beats a penalty, and splits each side the
same way. It runs on log medians, so a shift is a ratio whatever the row's
scale, with the penalty 2 log(n) sigma^2 (a BIC-like cost per change)
where sigma is the series' noise read from the differences of successive
points (1.4826 MAD / sqrt 2: a level shift is one large difference, so it
barely moves that estimate). A found change is kept when its size, the ratio
of the median level after it to the median level before it (between the kept
changes on either side), is at least MIN_SHIFT. That is not the verdicts'
practical threshold (3 %): a verdict also needs its interval to exclude 1 at a
family-wise alpha, while a level shift has only its penalty, and on series of
14 medians of identical code the penalty alone let through a shift of 3 % or
more in 5.5-21 % of series at 2-5 % noise, one of 10 % or more in 0-1.7 %
(bench/experiments/shift_size.py, reports/history/shift_size.csv). Series
shorter than MIN_POINTS are not tested. Each split is one pass of cumulative sums (numpy), so a series of
thousands of runs costs milliseconds; PELT (ruptures), tried first, costs
seconds per series of a few hundred runs in its Python loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd

from bench.history.sources import KEY_COLUMNS

MIN_POINTS = 6  # at least MIN_SEGMENT points on each side of a change
MIN_SEGMENT = 3
MIN_SHIFT = 0.10  # the smallest level shift named (see the module docstring for why not the verdicts' 3 %)
NOISE_FLOOR = 0.005  # log units: below 0.5 % run-to-run noise no timer on these machines reads finer


@dataclass(frozen=True)
class Change:
    index: int  # the first point of the new level
    size: float  # median level after / median level before


def noise(log_values: np.ndarray) -> float:
    diffs = np.diff(log_values)
    return max(NOISE_FLOOR, 1.4826 * float(np.median(np.abs(diffs - np.median(diffs)))) / math.sqrt(2))


def find_changes(values: np.ndarray, threshold: float) -> list[Change]:
    """The level shifts of one series of medians (in run order) at least ``threshold`` in size."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) < MIN_POINTS or not (values > 0).all():
        return []
    logs = np.log(values)
    sigma = noise(logs)
    splits = _segment(logs, 0, 2 * math.log(len(logs)) * sigma**2)
    # A split smaller than the threshold is noise, not a level: merge it away (the smallest first) and
    # measure the others again, so a change's size is read between the levels on either side of it, not
    # against a short stretch of noise beside it.
    while splits:
        sizes = _sizes(values, splits)
        smallest = min(range(len(splits)), key=lambda i: abs(math.log(sizes[i])))
        if abs(math.log(sizes[smallest])) >= math.log(1 + threshold):
            return [Change(index, size) for index, size in zip(splits, sizes, strict=True)]
        del splits[smallest]
    return []


def _sizes(values: np.ndarray, splits: list[int]) -> list[float]:
    """Per split, the median level after it over the median level before it, between the neighbouring splits."""
    bounds = [0, *splits, len(values)]
    return [
        float(np.median(values[bounds[i] : bounds[i + 1]]) / np.median(values[bounds[i - 1] : bounds[i]]))
        for i in range(1, len(bounds) - 1)
    ]


def _segment(logs: np.ndarray, offset: int, penalty: float) -> list[int]:
    """The change indices (offset into the whole series) binary segmentation finds in ``logs``."""
    n = len(logs)
    if n < 2 * MIN_SEGMENT:
        return []
    sums = np.cumsum(logs)
    splits = np.arange(MIN_SEGMENT, n - MIN_SEGMENT + 1)
    left, right = sums[splits - 1], sums[-1] - sums[splits - 1]
    # the drop in squared deviations when the segment splits before index k
    gains = left**2 / splits + right**2 / (n - splits) - sums[-1] ** 2 / n
    best = int(np.argmax(gains))
    if gains[best] <= penalty:
        return []
    k = int(splits[best])
    return [*_segment(logs[:k], offset, penalty), offset + k, *_segment(logs[k:], offset + k, penalty)]


def series(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Every row of every run with its series' names, in run order."""
    return con.execute(
        f"""
        SELECT u.machine_key, u.options_key, {", ".join(f"r.{c}" for c in KEY_COLUMNS)}, r.report_id, r.median_us,
               u.sha, u.dirty, u.started_at
        FROM rows r JOIN runs u USING (report_id)
        ORDER BY u.machine_key, u.options_key, {", ".join(f"r.{c}" for c in KEY_COLUMNS)}, u.started_at, u.path
        """
    ).df()


def all_changes(con: duckdb.DuckDBPyConnection, threshold: float) -> pd.DataFrame:
    """One line per level shift: the series, the report and commit where the new level starts, and its size."""
    found = []
    for names, group in series(con).groupby(["machine_key", "options_key", *KEY_COLUMNS], sort=False):
        for change in find_changes(group["median_us"].to_numpy(), threshold):
            at = group.iloc[change.index]
            found.append(
                (*names, at["report_id"], at["sha"], bool(at["dirty"]), at["started_at"], change.size, len(group))
            )
    columns = ["machine_key", "options_key", *KEY_COLUMNS, "report_id", "sha", "dirty", "started_at", "size", "points"]
    return pd.DataFrame(found, columns=columns)
