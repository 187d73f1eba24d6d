"""``invoke bench.compare BASE NEW``: did NEW get slower than BASE, row by row?

Rows are joined on the key columns (workload, shape, dtype, baseline, variant).
For each row present in both reports:
  * ratio = median(NEW) / median(BASE) of the raw per-call samples;
  * a 95 % bootstrap interval of that ratio (percentile method): timings are
    right-skewed with long tails, the median is what the report shows, and the
    bootstrap needs no assumption about the distribution. (Hodges-Lehmann
    estimates a shift, not a ratio, and needs all n1*n2 pairwise differences.)
    The resampled medians are drawn exactly from their binomial distribution
    (see bootstrap_medians), so 20 000-sample rows cost no more than small ones;
  * a one-sided Mann-Whitney U test on the raw samples (as asv does, with its
    default significance level 0.002): is NEW stochastically slower?
  * the best-round ratio = min over NEW's rounds of the round median / the same
    for BASE: each report spreads a row over ROUNDS passes of the whole run
    (bench/run.py), and a real slowdown is in every round, whereas a stretch
    of seconds in which the machine was slow (seen on this VM with no other
    process running) is in some rounds only. Noise only ever adds time, so the
    best round is the least disturbed estimate (timeit's "min of repeats").
Reports from different machines are not compared: the ratios would measure the
machines (seen: 34 of 35 rows "regressed" by 1.08-7.7x between two VMs of one
kind running the same code, mostly in how their kernels served page faults).
When a machine fact (MACHINE_COLUMNS) differs, compare names each one and exits
with MACHINES_DIFFER, unless allow_different_machines: then the table is printed
under a warning. Measure two builds on one machine with `invoke bench --against REF`.

A row is a regression only when ALL hold: the slowdown is beyond the threshold
(ratio > 1 + threshold), it is significant (p < alpha), and it is in every
round (best-round ratio > 1 + threshold); and it is not a limit row (a copy or
an empty call: those measure the machine and are shown, not counted). A row that fails only the last test
is marked "transient" (re-run it on a quiet machine) and does not fail the
comparison. Improvements are judged the same way the other way round.

Exit codes: 0 no regression; 1 a row regressed; 2 an input is not a report of
this schema version; 3 the reports come from different machines (refused).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table
from scipy.stats import binom, mannwhitneyu

from bench.report import KEY_COLUMNS, ReportError, RowSamples, read_report, read_samples

BOOTSTRAP_RESAMPLES = 4000
CONFIDENCE = 0.95
# Facts of the machine and runtime a timing depends on: reports differing in any are refused.
MACHINE_COLUMNS = ("host", "cpu_model", "threads", "device", "cpu_allocator", "thp", "torch", "onnxruntime")
# Columns whose difference between the two reports a reader must know about (expected between two builds).
ENVIRONMENT_COLUMNS = ("git_commit", "onnx", "compiler", "cxx11_abi")
EXIT_OK, EXIT_REGRESSION, EXIT_NOT_A_REPORT, EXIT_MACHINES_DIFFER = 0, 1, 2, 3

# Rows of this workload are the machine's limits (bench/limits.py), measured for reference: a change in
# them is the machine or the process, never the code under test (seen in A/A runs: one process's
# 16 KiB copy 12 % slower than the other's in every round), so they are shown but not counted.
LIMIT_WORKLOAD = "limit"

BUSY_SHARE = 0.10  # other processes above this share of the CPU make a row suspect

REGRESSION, IMPROVEMENT, SAME, NOT_SIGNIFICANT, TRANSIENT = "REGRESSION", "improvement", "same", "not significant", "transient"


@dataclass(frozen=True)
class RowComparison:
    key: tuple[str, ...]
    base_median_us: float
    new_median_us: float
    ratio: float
    ci_low: float
    ci_high: float
    best_round_ratio: float
    p_slower: float
    p_faster: float
    verdict: str


@dataclass
class Comparison:
    rows: list[RowComparison]
    only_in_base: list[tuple[str, ...]] = field(default_factory=list)
    only_in_new: list[tuple[str, ...]] = field(default_factory=list)
    environment_changes: list[str] = field(default_factory=list)
    machine_differences: list[str] = field(default_factory=list)  # "fact: BASE value -> NEW value"

    @property
    def regressions(self) -> list[RowComparison]:
        """Regressions of the code: limit rows (a copy, an empty call) measure the machine and are not counted."""
        return [r for r in self.rows if r.verdict == REGRESSION and r.key[0] != LIMIT_WORKLOAD]

    @property
    def limit_changes(self) -> list[RowComparison]:
        return [r for r in self.rows if r.verdict == REGRESSION and r.key[0] == LIMIT_WORKLOAD]


def bootstrap_medians(samples: np.ndarray, rng: np.random.Generator, resamples: int = BOOTSTRAP_RESAMPLES) -> np.ndarray:
    """Medians of ``resamples`` bootstrap resamples of ``samples``, drawn exactly without building them.

    The median of a resample of size n is the order statistic x_(j) for which
    at least m = ceil(n/2) resampled values are <= x_(j); that count is
    Binomial(n, j/n). So P(median <= x_(j)) = P(Binomial(n, j/n) >= m), and the
    medians are drawn by inverting that distribution: O(n) per row instead of
    O(resamples * n), with no subsampling of long runs.
    """
    x = np.sort(np.asarray(samples, dtype=np.float64))
    n = len(x)
    m = (n + 1) // 2
    cdf = binom.sf(m - 1, n, np.arange(1, n + 1) / n)
    return x[np.minimum(np.searchsorted(cdf, rng.random(resamples)), n - 1)]


def bootstrap_ratio_interval(
    base: np.ndarray, new: np.ndarray, rng: np.random.Generator, resamples: int = BOOTSTRAP_RESAMPLES, confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """Percentile-bootstrap interval of median(new) / median(base) (the two resampled independently)."""
    ratios = bootstrap_medians(new, rng, resamples) / bootstrap_medians(base, rng, resamples)
    low, high = np.quantile(ratios, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(low), float(high)


def _p_value(a: np.ndarray, b: np.ndarray, alternative: str) -> float:
    if len(a) < 2 or len(b) < 2:
        return math.nan
    return float(mannwhitneyu(a, b, alternative=alternative).pvalue)


def compare_samples(
    key: tuple[str, ...], base: RowSamples, new: RowSamples, threshold: float, alpha: float, rng: np.random.Generator
) -> RowComparison:
    base_median, new_median = float(np.median(base.values)), float(np.median(new.values))
    ratio = new_median / base_median
    best_round_ratio = float(new.round_medians().min() / base.round_medians().min())
    ci_low, ci_high = bootstrap_ratio_interval(base.values, new.values, rng)
    p_slower, p_faster = _p_value(new.values, base.values, "greater"), _p_value(new.values, base.values, "less")
    if ratio > 1 + threshold:
        if not p_slower < alpha:
            verdict = NOT_SIGNIFICANT
        else:
            verdict = REGRESSION if best_round_ratio > 1 + threshold else TRANSIENT
    elif ratio < 1 / (1 + threshold):
        if not p_faster < alpha:
            verdict = NOT_SIGNIFICANT
        else:
            verdict = IMPROVEMENT if best_round_ratio < 1 / (1 + threshold) else TRANSIENT
    else:
        verdict = SAME
    return RowComparison(key, base_median, new_median, ratio, ci_low, ci_high, best_round_ratio, p_slower, p_faster, verdict)


def _environment_changes(base: pd.DataFrame, new: pd.DataFrame) -> list[str]:
    changes = []
    for name, frame in (("BASE", base), ("NEW", new)):
        busiest = frame.other_cpu_share.max()
        if busiest > BUSY_SHARE:
            changes.append(
                f"{name} was measured while other processes used up to {100 * busiest:.0f}% of the CPU: "
                "those rows include waiting for a core"
            )
    return changes + _differences(base, new, ENVIRONMENT_COLUMNS)


def _differences(base: pd.DataFrame, new: pd.DataFrame, columns: tuple[str, ...]) -> list[str]:
    differences = []
    for column in columns:
        before, after = sorted(set(base[column].astype(str))), sorted(set(new[column].astype(str)))
        if before != after:
            differences.append(f"{column}: {', '.join(before)} -> {', '.join(after)}")
    return differences


def compare_reports(base_csv: Path | str, new_csv: Path | str, threshold: float = 0.10, alpha: float = 0.002, seed: int = 0) -> Comparison:
    if not threshold >= 0:
        raise ValueError(f"threshold must be >= 0 (a fraction: 0.10 = 10%), got {threshold}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
    base, new = read_report(base_csv), read_report(new_csv)
    base_samples, new_samples = read_samples(base_csv), read_samples(new_csv)
    base_keys = [tuple(k) for k in base[list(KEY_COLUMNS)].astype(str).values.tolist()]
    new_keys = [tuple(k) for k in new[list(KEY_COLUMNS)].astype(str).values.tolist()]
    for csv, keys, samples in ((base_csv, base_keys, base_samples), (new_csv, new_keys, new_samples)):
        missing = [k for k in keys if k not in samples]
        if missing:
            raise ReportError(f"{csv}: samples sidecar lacks rows {missing[:3]}{' ...' if len(missing) > 3 else ''}")
    rng = np.random.default_rng(seed)  # a fixed seed: the same two reports always give the same table
    in_both = [k for k in base_keys if k in set(new_keys)]
    rows = [compare_samples(k, base_samples[k], new_samples[k], threshold, alpha, rng) for k in in_both]
    return Comparison(
        rows=rows,
        only_in_base=[k for k in base_keys if k not in set(new_keys)],
        only_in_new=[k for k in new_keys if k not in set(base_keys)],
        environment_changes=_environment_changes(base, new),
        machine_differences=_differences(base, new, MACHINE_COLUMNS),
    )


def comparison_table(comparison: Comparison, threshold: float, alpha: float) -> Table:
    table = Table(
        title=f"NEW / BASE median per call; regression = ratio and best-round ratio > {1 + threshold:.2f} and Mann-Whitney p < {alpha:g}"
    )
    numeric = ("base µs", "new µs", "ratio", "95% CI", "best round", "p(slower)")
    for name in (*KEY_COLUMNS, *numeric, "verdict"):
        table.add_column(name, justify="right" if name in numeric else "left")
    styles = {REGRESSION: "bold red", IMPROVEMENT: "green", NOT_SIGNIFICANT: "yellow", TRANSIENT: "yellow", SAME: ""}
    for r in comparison.rows:
        table.add_row(
            *r.key, f"{r.base_median_us:.2f}", f"{r.new_median_us:.2f}", f"{r.ratio:.3f}", f"{r.ci_low:.3f}-{r.ci_high:.3f}", f"{r.best_round_ratio:.3f}",
            "-" if math.isnan(r.p_slower) else f"{r.p_slower:.2g}", f"[{styles[r.verdict]}]{r.verdict}[/]" if styles[r.verdict] else r.verdict,
        )
    return table


def main(
    base: str, new: str, threshold: float = 0.10, alpha: float = 0.002, console: Console | None = None, allow_different_machines: bool = False
) -> int:
    console = console or Console(width=None if Console().is_terminal else 200)
    try:
        comparison = compare_reports(base, new, threshold=float(threshold), alpha=float(alpha))
    except (ReportError, ValueError) as error:
        console.print(f"[red bold]compare: {error}[/]", highlight=False)
        return EXIT_NOT_A_REPORT
    if comparison.machine_differences and not allow_different_machines:
        console.print(
            "[red bold]compare: the two reports come from different machines or runtimes[/] - differing: "
            + "; ".join(comparison.machine_differences)
            + ".\nTheir ratios would measure the machines, not the code. Measure both builds on one machine in one run: "
            "`invoke bench --against REF`. To see the table anyway: `invoke bench.compare --allow-different-machines BASE NEW`.",
            highlight=False,
        )
        return EXIT_MACHINES_DIFFER
    warning = (
        "[red bold]WARNING: different machines or runtimes[/] (" + "; ".join(comparison.machine_differences) + "): "
        "the ratios below measure the machines as much as the code"
    )
    if comparison.machine_differences:
        console.print(warning, highlight=False)
    console.print(comparison_table(comparison, float(threshold), float(alpha)))
    if comparison.machine_differences:
        console.print(warning, highlight=False)
    for change in comparison.environment_changes:
        console.print(f"[yellow]environment:[/] {change}", highlight=False)
    for label, keys in (("only in BASE", comparison.only_in_base), ("only in NEW", comparison.only_in_new)):
        for key in keys:
            console.print(f"{label}: {' '.join(key)}", highlight=False)
    count = len(comparison.regressions)
    if comparison.limit_changes:
        rows = ", ".join(f"{r.key[3]}/{r.key[4]} {r.key[1]}" for r in comparison.limit_changes)
        console.print(f"[yellow]limit rows slower in NEW (the machine or the process, not the code; not counted):[/] {rows}", highlight=False)
    transient = sum(r.verdict == TRANSIENT for r in comparison.rows)
    if transient:
        console.print(f"[yellow]{transient} row(s) changed in some rounds only (machine noise): not counted; re-run on a quiet machine to be sure[/]")
    console.print(f"{len(comparison.rows)} rows compared, {count} regression(s)" + ("" if count else " - OK"))
    return EXIT_REGRESSION if count else EXIT_OK
