"""``invoke bench.compare BASE NEW``: did NEW get slower than BASE, row by row?

Rows are joined on the key columns (KEY_COLUMNS). The statistics stand on
independent units, never on the raw per-call samples: consecutive samples of
one process share its state (buffer addresses and their 4 KiB aliasing, the
cores its threads landed on, the allocator's layout, a noisy neighbour's few
seconds), so thousands of them are not thousands of observations, and any test
on them calls every shift significant. A unit is one round of a row: in an A/B
run (`invoke bench --against REF`) each round is a fresh worker process, in a
plain run a pass over the grid. For each row present in both reports:
  * unit value = the median of that round's samples;
  * ratio = geometric mean of NEW's unit values / that of BASE's. When the two
    reports are paired (an A/B run: round k of NEW and round k of BASE ran
    side by side, job by job), it is the trimmed geometric mean of the
    per-pair ratios (TRIM of the pairs off each end, from 10 pairs on), which
    cancels what the pair shared (drift, a busy minute) and does not let one
    odd pair of processes decide a row;
  * its confidence interval is a percentile bootstrap over the units
    (scipy.stats.bootstrap, resampling pairs when paired), widened to the
    Student-t interval of the same log values where that is wider: with a
    handful of units the percentile bootstrap is far too narrow (at 4 units a
    nominal 95 % covers about 80 %). Where pairs are trimmed (an A/B run's 8
    to 10 pairs: from 10), it is Yuen's interval of the trimmed mean alone;
  * alpha (default 0.05) is family-wise over the m rows the comparison counts
    (every row but the limits): each row's interval has confidence 1 - alpha/m
    (Bonferroni). A comparison fails if any of its rows regresses, so per-row
    95 % intervals fail on identical code at a rate that grows with m: seen
    on the development VM, 3 rows flagged in 11 A/B runs of 31 counted rows
    each (two of them A/A or on rows the change did not touch); at family-wise
    95 % the same samples flag none. An A/B run (bench/ab/driver.py) spends it in two
    stages: every row, then the rows left INCONCLUSIVE past a bound (suspects)
    measured again and judged alone (``only``);
  * separate reports (unpaired): each row's variance of its log unit values
    is moderated over the rows of its kind (one workload on one device;
    bench/stats/moderated.py), so a row with 3 units a side borrows degrees of
    freedom from its neighbours; the interval is the pooled t interval of the
    difference of mean logs at the moderated variance; a row timed on several
    CPU threads whose units ran on both of the host's core placements keeps
    a verdict only where the comparison at equal placement gives it too, and
    one whose placement and side coincide gets none (bench/stats/placement.py);
  * the verdict (bench/stats/verdicts.py) reads significance and relevance
    apart, with the practical threshold t (default 3 %):
      REGRESSION    the interval lies above 1 and the ratio above 1 + t;
      IMPROVEMENT   the interval lies below 1 and the ratio below 1 / (1 + t);
      SAME          the whole interval lies within [1 / (1 + t), 1 + t];
      INCONCLUSIVE  anything else (or fewer than 2 units a side): it does not
                    fail the comparison;
  * detectable_80 = the true slowdown this row flags with probability 80 % at
    its noise (its standard error and degrees of freedom, its alpha, t).
Limit rows (a copy, an empty call) measure the machine: a change in them is
shown, never counted.

Reports from different machines are not compared: the ratios would measure the
machines (seen: 34 of 35 rows "regressed" by 1.08-7.7x between two VMs of one
kind running the same code). When a machine fact (MACHINE_COLUMNS: the machine
id, CPU, power policy, runtimes, ...) differs, compare names each one and exits
with MACHINES_DIFFER, unless allow_different_machines: then the table is printed
under a warning. The device is not a machine fact: it is part of the row key,
so two reports over different device sets compare on the devices they share.
Measure two builds on one machine with `invoke bench --against REF`.

The machine facts include the hardware (bench/hardware.py: CPU vendor, family,
model, stepping, microcode, caches, flags, hypervisor, memory, GPU model), since
VMs of one image share /etc/machine-id and a CPU name. A report of an earlier
schema lacks them: compare says which it lacks and refuses unless forced.

Exit codes: 0 no regression; 1 a row regressed; 2 an input is not a report of
a schema this code reads; 3 the reports come from different machines, or an
earlier schema's report cannot tell (refused).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table
from scipy.stats import bootstrap, t, trim_mean

from bench.measure.hardware import HARDWARE_COLUMNS
from bench.measure.machine import BUSY_SHARE
from bench.report.schema import KEY_COLUMNS, ReportError, RowSamples, is_earlier_schema_value, read_report, read_samples
from bench.stats.moderated import NO_PRIOR, Prior, fit_prior, squeeze
from bench.stats.placement import NOT_PROBED, Placements, placements_of
from bench.stats.verdicts import (
    DEFAULT_THRESHOLD,
    IMPROVEMENT,
    INCONCLUSIVE,
    REGRESSION,
    SAME,
    detectable_80,
    se_of_interval,
    verdict_of,
)

BOOTSTRAP_RESAMPLES = 4000
# Share of the pairs trimmed from each end of a paired row's log ratios (none below 10 pairs): one pair in ten
# can sit 20-40 % off on a row whose other pairs agree within 2 % (an A/A run of 10 pairs on the development
# VM: 16 of 32 counted rows had a pair more than 15 % off the row's median), and a mean carries it whole into
# the interval's width.
TRIM = 0.1
DEFAULT_ALPHA = 0.05  # 1 - the confidence of the ratio's interval
# Facts of the machine, its power policy and the runtime a timing depends on: reports differing in any are refused.
MACHINE_COLUMNS = (
    "machine_id",
    "cpu_model",
    "threads",
    "cpu_allocator",
    "thp",
    "torch",
    "onnxruntime",
    "cpu_governor",
    "cpu_epp",
    "cpu_boost",
    "cpu_freq_range_mhz",
    "gpu_policy",
    *HARDWARE_COLUMNS,
)
# Columns whose difference between the two reports a reader must know about (expected between two builds).
ENVIRONMENT_COLUMNS = ("git_commit", "onnx", "compiler", "cxx11_abi", "host")
EXIT_OK, EXIT_REGRESSION, EXIT_NOT_A_REPORT, EXIT_MACHINES_DIFFER = 0, 1, 2, 3

# Rows of this workload are the machine's limits (bench/plan/limits.py), measured for reference: a change in
# them is the machine or the process, never the code under test (seen in A/A runs: one process's
# 16 KiB copy 12 % slower than the other's in every round), so they are shown but not counted.
LIMIT_WORKLOAD = "limit"

Key = tuple[str, ...]  # a row: KEY_COLUMNS' values

__all__ = ["DEFAULT_THRESHOLD", "IMPROVEMENT", "INCONCLUSIVE", "REGRESSION", "SAME", "verdict_of"]
MIN_UNITS = 2  # per side: one unit has no spread, so no interval
# A suspect's estimate lies past this share of the threshold. At the threshold itself, a true 5 % slowdown
# whose first 10 pairs happened to read 2.1-2.8 % was never measured again: 11 of the 21 op rows a
# calibrated 5 % slowdown left unflagged in 10 quick A/B runs (reports/power_curves/confirm_share).
SUSPECT_BOUND_SHARE = 0.5


@dataclass(frozen=True)
class RowComparison:
    key: tuple[str, ...]
    base_median_us: float  # the pooled samples' medians, for reading
    new_median_us: float
    ratio: float  # from the units (see the module docstring)
    ci_low: float
    ci_high: float
    units: int  # independent units the interval stands on (pairs when paired, else the smaller side's count)
    paired: bool
    detectable_80: float  # the slowdown (a fraction) this row flags with probability 80 %; NaN without an interval
    verdict: str
    confirmed: bool = False  # judged again on fresh pairs (an A/B run's second stage): these numbers are theirs
    placement: str = ""  # what the core placements did to the units (bench/stats/placement.py); "" nothing


@dataclass
class Comparison:
    rows: list[RowComparison]
    only_in_base: list[tuple[str, ...]] = field(default_factory=list)
    only_in_new: list[tuple[str, ...]] = field(default_factory=list)
    environment_changes: list[str] = field(default_factory=list)
    machine_differences: list[str] = field(default_factory=list)  # "fact: BASE value -> NEW value"
    # Reports of an earlier schema, which lack facts that tell machines apart: "BASE (schema 5): facts ...".
    earlier_schema: list[str] = field(default_factory=list)
    row_alpha: float = DEFAULT_ALPHA  # each row's 1 - confidence: the family-wise alpha over the counted rows

    @property
    def regressions(self) -> list[RowComparison]:
        """Regressions of the code: limit rows (a copy, an empty call) measure the machine and are not counted."""
        return [r for r in self.rows if r.verdict == REGRESSION and r.key[0] != LIMIT_WORKLOAD]

    @property
    def limit_changes(self) -> list[RowComparison]:
        return [r for r in self.rows if r.verdict == REGRESSION and r.key[0] == LIMIT_WORKLOAD]


def unit_medians(samples: RowSamples) -> dict[int, float]:
    """The median of each round's samples, by round number: the units of the statistics."""
    return {int(r): float(np.median(samples.values[samples.rounds == r])) for r in np.unique(samples.rounds)}


@dataclass(frozen=True)
class Interval:
    """A ratio NEW / BASE, its interval, and the standard error and degrees of freedom of its log."""

    ratio: float
    low: float
    high: float
    se: float
    dof: float


def ratio_interval(
    base: np.ndarray, new: np.ndarray, paired: bool, alpha: float, rng: np.random.Generator, prior: Prior = NO_PRIOR
) -> tuple[float, float, float]:
    """(ratio, low, high): see :func:`log_interval`."""
    interval = log_interval(base, new, paired, alpha, rng, prior)
    return interval.ratio, interval.low, interval.high


def log_interval(
    base: np.ndarray,
    new: np.ndarray,
    paired: bool,
    alpha: float,
    rng: np.random.Generator,
    prior: Prior = NO_PRIOR,
    placements: Placements = NOT_PROBED,
) -> Interval:
    """Geometric-mean ratio of NEW's units to BASE's and its confidence interval at level 1 - ``alpha``.

    Paired: ``base[k]`` and ``new[k]`` ran side by side; the statistic is the
    trimmed mean of the pairs' log ratios (TRIM at each end: a mean below 10
    pairs, whose pairs are resampled, widened to Student's t interval; from 10
    pairs on, Yuen's interval alone). The percentile method rather than BCa:
    with a handful of units BCa's acceleration estimate is itself unstable, and
    a constant log ratio (a report against itself) is a degenerate sample BCa
    cannot handle.
    Unpaired: the difference of the sides' mean logs (at equal core placement
    where the units ran on both: :func:`unpaired_log_fit`), with the t
    interval at the row's variance moderated by ``prior`` (the rows of its
    kind: bench/stats/moderated.py); a bootstrap of 3 units a side has nothing
    to resample.
    """
    log_base, log_new = np.log(np.asarray(base, dtype=np.float64)), np.log(np.asarray(new, dtype=np.float64))
    if not paired:
        fit = unpaired_log_fit(log_base, log_new, placements)
        variance, dof = squeeze(fit.variance, fit.dof, prior)
        return student_interval(fit.estimate, math.sqrt(variance * fit.scale), dof, alpha)
    diffs = log_new - log_base
    estimate = float(_trimmed_mean(diffs))
    se, dof = _yuen_se(diffs)
    if int(TRIM * len(diffs)) > 0:
        # Yuen's interval alone: a percentile bootstrap of a trimmed mean of 10 units puts its far quantiles on
        # resamples that draw the odd pair two or three times, more than the trim removes.
        return student_interval(estimate, se, dof, alpha)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a degenerate resample distribution is a valid, zero-width interval here
        result = bootstrap(
            (diffs,),
            _trimmed_mean,
            n_resamples=BOOTSTRAP_RESAMPLES,
            confidence_level=1 - alpha,
            method="percentile",
            vectorized=True,
            paired=False,
            rng=rng,
        )
    low, high = result.confidence_interval
    if math.isnan(low) or math.isnan(high):  # all resamples equal: no spread
        low = high = estimate
    student = student_interval(estimate, se, dof, alpha)
    low, high = math.exp(min(low, math.log(student.low))), math.exp(max(high, math.log(student.high)))
    # The standard error the (possibly widened) interval stands for: what its power is computed from.
    return Interval(math.exp(estimate), low, high, se_of_interval(low, high, dof, alpha), dof)


@dataclass(frozen=True)
class UnpairedFit:
    """NEW's mean log less BASE's, and what its standard error is made of: sqrt(variance * scale)."""

    estimate: float
    scale: float
    variance: float
    dof: float


def unpaired_log_fit(log_base: np.ndarray, log_new: np.ndarray, placements: Placements = NOT_PROBED) -> UnpairedFit:
    """The side effect of an unpaired row; with mixed core placements, by least squares with the placement as a
    covariate (log value = mean + side + far placement + error), so the sides are compared at equal placement."""
    if not placements.mixed:
        variance, dof = pooled_log_variance(log_base, log_new)
        estimate = float(np.mean(log_new) - np.mean(log_base))
        return UnpairedFit(estimate, 1 / len(log_base) + 1 / len(log_new), variance, dof)
    values = np.concatenate([log_base, log_new])
    side = np.concatenate([np.zeros(len(log_base)), np.ones(len(log_new))])
    far = np.concatenate([placements.base_far, placements.new_far]).astype(float)
    design = np.column_stack([np.ones(len(values)), side, far])
    coefficients, *_ = np.linalg.lstsq(design, values, rcond=None)
    dof = len(values) - design.shape[1]
    residuals = values - design @ coefficients
    variance = float(residuals @ residuals / dof) if dof >= 1 else math.nan
    scale = float(np.linalg.inv(design.T @ design)[1, 1])
    return UnpairedFit(float(coefficients[1]), scale, variance, float(max(dof, 0)))


def pooled_log_variance(log_base: np.ndarray, log_new: np.ndarray) -> tuple[float, float]:
    """(variance, degrees of freedom) of the log unit values within the two sides, pooled."""
    dof = len(log_base) + len(log_new) - 2
    if dof < 1:
        return math.nan, 0.0
    squares = np.sum((log_base - log_base.mean()) ** 2) + np.sum((log_new - log_new.mean()) ** 2)
    return float(squares / dof), float(dof)


def student_interval(estimate: float, se: float, dof: float, alpha: float) -> Interval:
    if not se > 0:  # identical units: no spread
        return Interval(math.exp(estimate), math.exp(estimate), math.exp(estimate), 0.0, dof)
    half = float(t.ppf(1 - alpha / 2, dof)) * se
    return Interval(math.exp(estimate), math.exp(estimate - half), math.exp(estimate + half), se, dof)


def _trimmed_mean(values: np.ndarray, axis: int = -1) -> np.ndarray:
    return trim_mean(values, TRIM, axis=axis)


def _yuen_se(diffs: np.ndarray) -> tuple[float, float]:
    """(standard error, degrees of freedom) of the trimmed mean of the pairs' log ratios: Yuen's, from the
    winsorized variance, with h - 1 degrees of freedom for the h pairs kept (with nothing trimmed, Student's).
    It holds its coverage at a few units, where the percentile bootstrap does not."""
    n = len(diffs)
    cut = int(TRIM * n)  # as trim_mean cuts
    kept = n - 2 * cut
    ordered = np.sort(diffs)
    winsorized = np.clip(ordered, ordered[cut], ordered[n - cut - 1])
    return math.sqrt((n - 1) * np.var(winsorized, ddof=1) / (kept * (kept - 1))), kept - 1


def row_units(base: RowSamples, new: RowSamples, paired: bool) -> tuple[np.ndarray, np.ndarray, bool, Placements]:
    """(BASE's unit values, NEW's, paired, the units' core placements: bench/stats/placement.py).

    Paired (both have the same rounds and ``paired``): in round order, and the placements do not enter (a
    pair's two processes ran at the same moments).
    """
    base_units, new_units = unit_medians(base), unit_medians(new)
    paired = paired and base_units.keys() == new_units.keys()
    if paired:
        rounds = sorted(base_units)
        return np.array([base_units[r] for r in rounds]), np.array([new_units[r] for r in rounds]), True, NOT_PROBED
    placements = placements_of(list(base_units), list(new_units), base.round_sync_us(), new.round_sync_us())
    return np.array(list(base_units.values())), np.array(list(new_units.values())), False, placements


def compare_samples(
    key: tuple[str, ...],
    base: RowSamples,
    new: RowSamples,
    threshold: float,
    alpha: float,
    rng: np.random.Generator,
    paired: bool = False,
    prior: Prior = NO_PRIOR,
) -> RowComparison:
    """One row judged; ``prior``: the moderated variance's prior of the row's kind (unpaired rows only)."""
    base_median, new_median = float(np.median(base.values)), float(np.median(new.values))
    base_values, new_values, paired, placements = row_units(base, new, paired)
    units = min(len(base_values), len(new_values))
    if units < MIN_UNITS or placements.confounded:
        ratio = float(np.exp(np.mean(np.log(new_values)) - np.mean(np.log(base_values))))
        nan = math.nan
        return RowComparison(
            key, base_median, new_median, ratio, nan, nan, units, paired, nan, INCONCLUSIVE, placement=placements.note
        )
    interval = log_interval(base_values, new_values, paired, alpha, rng, prior)
    ratio, low, high = interval.ratio, interval.low, interval.high
    detectable = detectable_80(interval.se, interval.dof, alpha, threshold)
    verdict = verdict_of(ratio, low, high, threshold)
    if placements.mixed:
        # The placement may only withhold a verdict: with three units a side, a fit that explains one unit by
        # its placement also explains away a process that was slow for another reason (seen: an in-place add +
        # norm row whose processes read 1.8 or 4.2 ms, two of the slow ones far, flagged by the fit alone).
        at_equal = log_interval(base_values, new_values, paired, alpha, rng, prior, placements)
        if verdict_of(at_equal.ratio, at_equal.low, at_equal.high, threshold) != verdict:
            verdict = INCONCLUSIVE
        low, high = min(low, at_equal.low), max(high, at_equal.high)
        detectable = max(detectable, detectable_80(at_equal.se, at_equal.dof, alpha, threshold))
    return RowComparison(
        key, base_median, new_median, ratio, low, high, units, paired, detectable, verdict, placement=placements.note
    )


def kind_of(key: Key) -> tuple[str, str]:
    """The rows whose process-level variances are pooled: one workload on one device."""
    return key[0], key[5]


def kind_priors(
    keys: list[Key], base: dict[Key, RowSamples], new: dict[Key, RowSamples], paired: bool
) -> dict[tuple[str, str], Prior]:
    """Per kind, the prior of the moderated variance fitted over its unpaired rows' pooled log variances."""
    by_kind: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for key in keys:
        base_values, new_values, is_paired, placements = row_units(base[key], new[key], paired)
        if not is_paired and not placements.confounded and min(len(base_values), len(new_values)) >= MIN_UNITS:
            by_kind.setdefault(kind_of(key), []).append(pooled_log_variance(np.log(base_values), np.log(new_values)))
    return {kind: fit_prior(*map(np.array, zip(*rows, strict=True))) for kind, rows in by_kind.items()}


def _environment_changes(base: pd.DataFrame, new: pd.DataFrame) -> list[str]:
    changes = []
    for name, frame in (("BASE", base), ("NEW", new)):
        busiest = frame.other_cpu_share.max()
        if busiest > BUSY_SHARE:
            changes.append(
                f"{name} was measured while other processes used up to {100 * busiest:.0f}% of the CPU: "
                "those rows include waiting for a core"
            )
    return changes + column_differences(base, new, ENVIRONMENT_COLUMNS)


def _values(column: pd.Series) -> list[str]:
    """The distinct values of a column as text; an empty cell (a fact that does not apply to a row) is ""."""
    return sorted(set(column.astype("string").fillna("").astype(str)))


def column_differences(base: pd.DataFrame, new: pd.DataFrame, columns: tuple[str, ...]) -> list[str]:
    differences = []
    for column in columns:
        before, after = _values(base[column]), _values(new[column])
        if before != after:
            differences.append(f"{column}: {', '.join(before)} -> {', '.join(after)}")
    return differences


def with_confirmed(first: Comparison, second: Comparison) -> Comparison:
    """``first`` with each row ``second`` judged again replaced by that judgement (marked confirmed)."""
    again = {r.key: replace(r, confirmed=True) for r in second.rows}
    return replace(first, rows=[again.get(r.key, r) for r in first.rows])


def suspects(comparison: Comparison, threshold: float, bound_share: float = SUSPECT_BOUND_SHARE) -> list[Key]:
    """The counted rows left INCONCLUSIVE whose estimate lies past a bound: worth measuring again.

    The bound is ``bound_share`` of ``threshold``: an estimate there may be a
    change past the threshold read low by the first pairs' noise. Fresh pairs
    judged on their own settle them (bench/ab/driver.py confirms them); the
    choice reads only the first stage's data, so the second stage's alpha holds.
    """
    bound = threshold * bound_share
    return [
        r.key
        for r in comparison.rows
        if r.key[0] != LIMIT_WORKLOAD
        and r.verdict == INCONCLUSIVE
        and r.units >= MIN_UNITS
        and not (1 / (1 + bound) <= r.ratio <= 1 + bound)
    ]


def row_keys(frame: pd.DataFrame) -> list[Key]:
    """A report's row keys, in its order."""
    return [tuple(k) for k in frame[list(KEY_COLUMNS)].astype(str).values.tolist()]


def family_alpha_per_row(alpha: float, counted_rows: int) -> float:
    """Each row's alpha for a family-wise ``alpha`` over ``counted_rows`` rows (Bonferroni)."""
    return alpha / max(1, counted_rows)


def judge_rows(
    keys: list[Key],
    base: dict[Key, RowSamples],
    new: dict[Key, RowSamples],
    threshold: float,
    alpha: float,
    seed: int = 0,
    paired: bool = False,
) -> tuple[float, list[RowComparison]]:
    """(each row's alpha, the rows judged): ``keys`` as one family at ``alpha``, the limit rows outside it."""
    rng = np.random.default_rng(seed)  # a fixed seed: the same two reports always give the same table
    row_alpha = family_alpha_per_row(alpha, sum(k[0] != LIMIT_WORKLOAD for k in keys))
    priors = kind_priors(keys, base, new, paired)
    rows = [
        compare_samples(k, base[k], new[k], threshold, row_alpha, rng, paired, priors.get(kind_of(k), NO_PRIOR))
        for k in keys
    ]
    return row_alpha, rows


def compare_reports(
    base_csv: Path | str,
    new_csv: Path | str,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    seed: int = 0,
    paired: bool = False,
    only: Collection[Key] | None = None,
) -> Comparison:
    """Every row of both reports judged (see the module docstring); ``paired``: round k of each ran side by side.

    ``only``: judge just these rows (the family ``alpha`` is spread over is then theirs).
    """
    if not threshold >= 0:
        raise ValueError(f"threshold must be >= 0 (a fraction: 0.03 = 3%), got {threshold}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
    base, new = read_report(base_csv), read_report(new_csv)
    base_samples, new_samples = read_samples(base_csv), read_samples(new_csv)
    base_keys, new_keys = row_keys(base), row_keys(new)
    for csv, keys, samples in ((base_csv, base_keys, base_samples), (new_csv, new_keys, new_samples)):
        missing = [k for k in keys if k not in samples]
        if missing:
            raise ReportError(f"{csv}: samples sidecar lacks rows {missing[:3]}{' ...' if len(missing) > 3 else ''}")
    in_both = [k for k in base_keys if k in set(new_keys) and (only is None or k in set(only))]
    row_alpha, rows = judge_rows(in_both, base_samples, new_samples, threshold, alpha, seed, paired)
    return Comparison(
        row_alpha=row_alpha,
        rows=rows,
        only_in_base=[k for k in base_keys if k not in set(new_keys)],
        only_in_new=[k for k in new_keys if k not in set(base_keys)],
        environment_changes=_environment_changes(base, new),
        machine_differences=_machine_differences(base, new),
        earlier_schema=earlier_schema(base, new),
    )


def _machine_differences(base: pd.DataFrame, new: pd.DataFrame) -> list[str]:
    """The machine facts that differ, over the devices both reports measured (a GPU fact of a device only one
    report has is no difference: its rows are simply not compared). A fact one report's earlier schema did not
    record (or recorded with another meaning) cannot differ: it is named by ``earlier_schema`` instead."""
    shared = set(base.device.astype(str)) & set(new.device.astype(str))
    if not shared:
        before, after = (", ".join(sorted(set(report.device.astype(str)))) for report in (base, new))
        return [f"device: {before} -> {after}"]
    base, new = base[base.device.isin(shared)], new[new.device.isin(shared)]
    checkable = tuple(c for c in MACHINE_COLUMNS if _earlier(base[c]) == _earlier(new[c]))
    return column_differences(base, new, checkable)


def _earlier(column: pd.Series) -> bool:
    return bool(column.map(is_earlier_schema_value).any())


def earlier_schema(base: pd.DataFrame, new: pd.DataFrame) -> list[str]:
    """For each report of an earlier schema: the machine facts it lacks, which the comparison cannot check."""
    found = []
    for name, frame in (("BASE", base), ("NEW", new)):
        lacking = [c for c in MACHINE_COLUMNS if _earlier(frame[c])]
        if lacking:
            found.append(f"{name} is a report of an earlier schema and lacks {', '.join(lacking)}")
    return found


def comparison_table(comparison: Comparison, threshold: float, alpha: float, title: str = "") -> Table:
    confidence = f"{100 * (1 - alpha):g}% family-wise ({100 * (1 - comparison.row_alpha):.2f}% per row)"
    table = Table(
        title=(title or "NEW / BASE per unit (a round; an A/B run's rounds are processes, paired)") + "; "
        f"{confidence} interval: REGRESSION when it lies above 1 and the ratio above {1 + threshold:.3f}, "
        f"SAME when it lies within [{1 / (1 + threshold):.3f}, {1 + threshold:.3f}]; "
        "detectable_80: the slowdown the row flags with probability 80 % at its noise"
    )
    numeric = ("base µs", "new µs", "ratio", f"{confidence} CI", "units", "detectable_80")
    for name in (*KEY_COLUMNS, *numeric, "verdict"):
        table.add_column(name, justify="right" if name in numeric else "left")
    styles = {REGRESSION: "bold red", IMPROVEMENT: "green", INCONCLUSIVE: "yellow", SAME: ""}
    for r in comparison.rows:
        table.add_row(
            *r.key,
            f"{r.base_median_us:.2f}",
            f"{r.new_median_us:.2f}",
            f"{r.ratio:.3f}",
            "-" if math.isnan(r.ci_low) else f"{r.ci_low:.3f}-{r.ci_high:.3f}",
            f"{r.units}{' pairs' if r.paired else ''}",
            "-" if math.isnan(r.detectable_80) else f"{100 * r.detectable_80:.0f}%",
            f"[{styles[r.verdict]}]{r.verdict}[/]" if styles[r.verdict] else r.verdict,
        )
    return table


def main(
    base: str,
    new: str,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    console: Console | None = None,
    allow_different_machines: bool = False,
    paired: bool = False,
    force: bool = False,
) -> int:
    console = console or Console(width=None if Console().is_terminal else 200)
    try:
        comparison = compare_reports(base, new, threshold=float(threshold), alpha=float(alpha), paired=paired)
    except (ReportError, ValueError) as error:
        console.print(f"[red bold]compare: {error}[/]", highlight=False)
        return EXIT_NOT_A_REPORT
    return print_comparison(comparison, float(threshold), float(alpha), console, allow_different_machines, force=force)


def print_comparison(
    comparison: Comparison,
    threshold: float,
    alpha: float,
    console: Console,
    allow_different_machines: bool = False,
    title: str = "",
    summary: bool = True,
    force: bool = False,
) -> int:
    """Print the table and (``summary``) what it found; the exit code (regressions count, limit rows do not).

    ``force``: compare a report of an earlier schema anyway (its missing facts are printed as a warning).
    """
    if comparison.earlier_schema and not force:
        console.print(
            "[red bold]compare: the machines cannot be told apart[/] - "
            + "; ".join(comparison.earlier_schema)
            + ".\nBefore schema 6 a report recorded no hardware facts, and its machine id was /etc/machine-id's "
            "alone, which every VM made from one image shares: a Zen 4 and a Zen 5 VM read as one machine. "
            "Measure both on this checkout, or `invoke bench.compare --force BASE NEW` to compare them anyway.",
            highlight=False,
        )
        return EXIT_MACHINES_DIFFER
    if comparison.earlier_schema:
        console.print(
            "[red bold]WARNING: forced[/]: " + "; ".join(comparison.earlier_schema) + " (not checked)",
            highlight=False,
        )
    if comparison.machine_differences and not allow_different_machines:
        console.print(
            "[red bold]compare: the two reports come from different machines or runtimes[/] - differing: "
            + "; ".join(comparison.machine_differences)
            + ".\nTheir ratios would measure the machines, not the code. Measure both builds on one machine in one "
            "run: `invoke bench --against REF`. To see the table anyway: "
            "`invoke bench.compare --allow-different-machines BASE NEW`.",
            highlight=False,
        )
        return EXIT_MACHINES_DIFFER
    warning = (
        "[red bold]WARNING: different machines or runtimes[/] (" + "; ".join(comparison.machine_differences) + "): "
        "the ratios below measure the machines as much as the code"
    )
    if comparison.machine_differences:
        console.print(warning, highlight=False)
    console.print(comparison_table(comparison, threshold, alpha, title))
    if comparison.machine_differences:
        console.print(warning, highlight=False)
    for change in comparison.environment_changes:
        console.print(f"[yellow]environment:[/] {change}", highlight=False)
    for label, keys in (("only in BASE", comparison.only_in_base), ("only in NEW", comparison.only_in_new)):
        for key in keys:
            console.print(f"{label}: {' '.join(key)}", highlight=False)
    return print_summary(comparison, console) if summary else _exit_code(comparison)


def _exit_code(comparison: Comparison) -> int:
    if comparison.machine_differences:
        return EXIT_MACHINES_DIFFER
    return EXIT_REGRESSION if comparison.regressions else EXIT_OK


def print_summary(comparison: Comparison, console: Console, note: str = "") -> int:
    """The lines under the table: limit rows, inconclusive rows, the count; returns the exit code."""
    count = len(comparison.regressions)
    if comparison.limit_changes:
        rows = ", ".join(f"{r.key[3]}/{r.key[4]} {r.key[1]}" for r in comparison.limit_changes)
        console.print(
            f"[yellow]limit rows slower in NEW (the machine or the process, not the code; not counted):[/] {rows}",
            highlight=False,
        )
    differs = [r for r in comparison.rows if r.placement == Placements.DIFFERS]
    if differs:
        console.print(
            f"[yellow]{len(differs)} row(s) INCONCLUSIVE because their threads ran on one core placement in every "
            "BASE process and on the other in every NEW process (the host moved the vCPUs; such rows read "
            "1.2-1.8x apart on identical code across placements): "
            + ", ".join(f"{r.key[3]}/{r.key[4]} {r.key[1]}" for r in differs)
            + "[/]",
            highlight=False,
        )
    covariate = sum(r.placement == Placements.MIXED for r in comparison.rows)
    if covariate:
        console.print(
            f"{covariate} row(s) ran on both core placements: a verdict stands only where the comparison at equal "
            "placement gives it too"
        )
    inconclusive = sum(r.verdict == INCONCLUSIVE for r in comparison.rows) - len(differs)
    if inconclusive:
        console.print(
            f"[yellow]{inconclusive} row(s) INCONCLUSIVE: their interval straddles a bound, too noisy to tell at this "
            "threshold (not counted; more rounds or a quieter machine narrow it)[/]"
        )
    console.print(
        f"{len(comparison.rows)} rows compared, {count} regression(s)"
        + ("" if count else " - OK")
        + (f"; {note}" if note else "")
    )
    return EXIT_REGRESSION if count else EXIT_OK
