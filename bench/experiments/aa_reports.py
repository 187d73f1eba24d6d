"""The A/A check of separate reports: N reports of one commit, compared pairwise as `bench.compare` compares them.

    python -m bench.experiments.aa_reports [--reports 10] [--processes 3] [--full] [--out reports/power_curves]
        [--judge-only]

Each report measures this checkout in fresh processes (one round each, as a
plain full `invoke bench` does; the quick grid unless --full), one after the
other. Every pair of them is then compared unpaired with moderated variances,
at equal core placement (bench/stats/placement.py): any REGRESSION or
IMPROVEMENT is a false alarm, and each row's interval at 95 % (per row)
either covers 1 or not. The same pair is judged again with the samples'
core-placement readings dropped, as it was judged before the probe existed.
Writes ``aa_pairs.csv`` (one line per pair) and ``aa_flagged.csv`` (every
row a pair flagged, with both sides' unit values), and prints the coverage
and the false-alarm rates. N reports give N (N - 1) / 2 pairs, not
independent ones: they share reports, so the rate has the uncertainty of
about N / 2 pairs.

The same pairs give the power on measured noise: NEW's samples of the fused
op rows are multiplied by 1 + s for each slowdown s in SHIFTS and the pair is
judged again as `bench.compare` judges it (every counted row in the family).
A row's process-to-process spread is what decides an unpaired verdict, and a
slowdown that multiplies every call leaves it as it was, so these are the
power curve's points for separate reports at this process count, on this
machine's own noise rather than a model of it. Writes ``shifted_power.csv``
(one line per pair and slowdown: op rows flagged, other rows flagged).
``--judge-only`` judges the reports a previous run left in the workspace.
"""

from __future__ import annotations

import argparse
import io
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console

from bench.experiments.rows import is_op_row
from bench.report.schema import KEY_COLUMNS, RowSamples, read_report, read_samples
from bench.stats import compare
from bench.stats.placement import Placements
from env.paths import REPO_ROOT, reports_dir

ROW_ALPHA = 0.05  # the coverage is read at 95 % per row
SHIFTS = (0.0, 0.02, 0.03, 0.05, 0.10, 0.20)  # the power curves' true slowdowns


def report_name(path: Path) -> str:
    """A report's name in the tables: its run folder (r0, r1, ...) for a pooled report, else the file's stem."""
    return path.parents[1].name if path.name == "pooled.csv" else path.stem


def unprobed(samples: dict[compare.Key, RowSamples]) -> dict[compare.Key, RowSamples]:
    """The samples without their core-placement readings: how the pair was judged before the probe existed."""
    return {k: RowSamples(v.values, v.rounds) for k, v in samples.items()}


def _verdicts(keys: list[compare.Key], base, new) -> list[compare.RowComparison]:
    _, rows = compare.judge_rows(keys, base, new, compare.DEFAULT_THRESHOLD, compare.DEFAULT_ALPHA)
    return [r for r in rows if r.key[0] != compare.LIMIT_WORKLOAD]


@dataclass(frozen=True)
class Pair:
    """Two reports of one commit, with their samples and the rows they share (base's order)."""

    base: Path
    new: Path
    base_samples: dict[compare.Key, RowSamples]
    new_samples: dict[compare.Key, RowSamples]
    keys: list[compare.Key]


def pairs_of(reports: list[Path]) -> Iterator[Pair]:
    """Every pair of ``reports``; each report's samples are read once."""
    samples = {path: read_samples(path) for path in reports}
    keys = {path: compare.row_keys(read_report(path)) for path in reports}
    for base, new in itertools.combinations(reports, 2):
        shared = [k for k in keys[base] if k in samples[new]]
        yield Pair(base, new, samples[base], samples[new], shared)


@dataclass(frozen=True)
class Judged:
    """Every pair of the reports judged: one line per pair, per flagged row, and per pair and slowdown."""

    pairs: pd.DataFrame
    flagged: pd.DataFrame
    shifted: pd.DataFrame


def judge_all(reports: list[Path], shifts=SHIFTS) -> Judged:
    lines, flagged, shifted = [], [], []
    for pair in pairs_of(reports):
        counted = _verdicts(pair.keys, pair.base_samples, pair.new_samples)
        before = _verdicts(pair.keys, unprobed(pair.base_samples), unprobed(pair.new_samples))
        lines.append(pair_line(pair, counted, before))
        flagged += flagged_lines(pair, counted)
        shifted += shifted_lines(pair, counted, before, shifts)
    return Judged(pd.DataFrame(lines), pd.DataFrame(flagged), pd.DataFrame(shifted))


def _names(pair: Pair) -> dict[str, str]:
    return {"base": report_name(pair.base), "new": report_name(pair.new)}


def pair_line(pair: Pair, counted: list[compare.RowComparison], before: list[compare.RowComparison]) -> dict:
    """One A/A pair: family-wise false alarms (``counted``: with the core-placement probe; ``before``: without it),
    and the per-row 95 % intervals that cover 1 (over the rows that have one: a row whose placements differ has
    none)."""
    counted_keys = [r.key for r in counted]
    priors = compare.kind_priors(counted_keys, pair.base_samples, pair.new_samples, False)
    rng = np.random.default_rng(0)
    covered = with_interval = 0
    for key in counted_keys:
        prior = priors.get(compare.kind_of(key))
        row = compare.compare_samples(
            key, pair.base_samples[key], pair.new_samples[key], 0.0, ROW_ALPHA, rng, False, prior
        )
        if not math.isnan(row.ci_low):
            with_interval += 1
            covered += row.ci_low <= 1 <= row.ci_high
    return {
        **_names(pair),
        "rows": len(counted),
        "false_regressions": sum(r.verdict == compare.REGRESSION for r in counted),
        "false_improvements": sum(r.verdict == compare.IMPROVEMENT for r in counted),
        "rows_placement_confounded": sum(r.placement == Placements.DIFFERS for r in counted),
        "rows_placement_covariate": sum(r.placement == Placements.MIXED for r in counted),
        "false_regressions_unprobed": sum(r.verdict == compare.REGRESSION for r in before),
        "false_improvements_unprobed": sum(r.verdict == compare.IMPROVEMENT for r in before),
        "rows_with_interval": with_interval,
        "covered_95": covered,
    }


def flagged_lines(pair: Pair, counted: list[compare.RowComparison]) -> list[dict]:
    """Every counted row the pair flags, with both sides' unit values: what a false alarm looked like."""
    lines = []
    for row in counted:
        if row.verdict not in (compare.REGRESSION, compare.IMPROVEMENT):
            continue
        units = [compare.unit_medians(samples[row.key]) for samples in (pair.base_samples, pair.new_samples)]
        lines.append(
            {
                **_names(pair),
                **dict(zip(KEY_COLUMNS, row.key, strict=True)),
                "verdict": row.verdict,
                "ratio": row.ratio,
                "ci_low": row.ci_low,
                "ci_high": row.ci_high,
                "base_units_us": " ".join(f"{v:.1f}" for v in units[0].values()),
                "new_units_us": " ".join(f"{v:.1f}" for v in units[1].values()),
            }
        )
    return lines


def shifted_lines(
    pair: Pair, counted: list[compare.RowComparison], before: list[compare.RowComparison], shifts=SHIFTS
) -> list[dict]:
    """Per slowdown s: the pair judged with NEW's fused op rows s slower, at the product's threshold and alpha
    (``op_rows_flagged_unprobed``: the same with the core-placement readings dropped). At s = 0 that is the pair's
    own verdicts, ``counted`` and ``before``."""
    lines = []
    for shift in shifts:
        judged, judged_before = counted, before
        if shift:
            slowed = {
                k: replace(v, values=v.values * (1 + shift)) if is_op_row(k) else v for k, v in pair.new_samples.items()
            }
            judged = _verdicts(pair.keys, pair.base_samples, slowed)
            judged_before = _verdicts(pair.keys, unprobed(pair.base_samples), unprobed(slowed))
        op_rows = [r for r in judged if is_op_row(r.key)]
        lines.append(
            {
                **_names(pair),
                "slowdown_pct": round(shift * 100),
                "counted_rows": len(judged),
                "op_rows": len(op_rows),
                "op_rows_flagged": sum(r.verdict == compare.REGRESSION for r in op_rows),
                "op_rows_flagged_unprobed": sum(
                    r.verdict == compare.REGRESSION for r in judged_before if is_op_row(r.key)
                ),
                "other_rows_flagged": sum(r.verdict == compare.REGRESSION for r in judged if not is_op_row(r.key)),
                "op_detectable_80_median": float(np.nanmedian([r.detectable_80 for r in op_rows])),
            }
        )
    return lines


def power_summary(shifted: pd.DataFrame) -> pd.DataFrame:
    """Per slowdown: P(REGRESSION) per op row, and the share of pairs with another row flagged."""
    return (
        shifted.groupby("slowdown_pct")
        .agg(
            pairs=("op_rows", "size"),
            op_rows=("op_rows", "sum"),
            op_rows_flagged=("op_rows_flagged", "sum"),
            op_rows_flagged_unprobed=("op_rows_flagged_unprobed", "sum"),
            pairs_other_flagged=("other_rows_flagged", lambda x: int((x > 0).sum())),
            op_detectable_80_median=("op_detectable_80_median", "median"),
        )
        .assign(
            p_regression_op_row=lambda f: f.op_rows_flagged / f.op_rows,
            p_regression_op_row_unprobed=lambda f: f.op_rows_flagged_unprobed / f.op_rows,
            p_false_alarm_pair=lambda f: f.pairs_other_flagged / f.pairs,
        )
        .reset_index()
    )


def measure(count: int, processes: int, full: bool, folder: Path) -> list[Path]:
    from bench.ab import driver as ab
    from bench.plan.options import BenchOptions

    reports = []
    for index in range(count):
        console = Console(file=io.StringIO(), width=250)
        options = BenchOptions(quick=not full, out_dir=folder)
        measured = ab.measure_processes({"RUN": ab.Tree(REPO_ROOT)}, options, processes, folder / f"r{index}", console)
        if measured.csv["RUN"] is None:
            raise SystemExit(f"report {index} measured nothing (logs under {folder / f'r{index}'})")
        reports.append(measured.csv["RUN"])
        print(f"report {index + 1}/{count}: {measured.csv['RUN']}", flush=True)
    return reports


def measured_reports(folder: Path) -> list[Path]:
    """The pooled reports a previous run left in ``folder``, in the order they were made."""
    found = [(int(path.parents[1].name[1:]), path) for path in folder.glob("r*/run/pooled.csv")]
    return [path for _, path in sorted(found)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reports", type=int, default=10)
    parser.add_argument("--processes", type=int, default=3, help="processes per report (default 3, a full run's)")
    parser.add_argument("--full", action="store_true", help="the full grid (default: the quick grid)")
    parser.add_argument("--out", type=Path, default=reports_dir() / "power_curves")
    parser.add_argument("--workspace", type=Path, default=REPO_ROOT / "build" / "aa_reports")
    parser.add_argument("--judge-only", action="store_true", help="judge the reports already in the workspace")
    args = parser.parse_args(argv)
    if args.reports < 2 or args.processes < 2:
        parser.error("--reports and --processes must be >= 2")
    if args.judge_only:
        reports = measured_reports(args.workspace)
        if len(reports) < 2:
            parser.error(f"--judge-only needs at least 2 reports under {args.workspace}, found {len(reports)}")
    else:
        reports = measure(args.reports, args.processes, args.full, args.workspace)
    judged = judge_all(reports)
    pairs, shifted = judged.pairs, judged.shifted
    args.out.mkdir(parents=True, exist_ok=True)
    pairs.to_csv(args.out / "aa_pairs.csv", index=False)
    judged.flagged.to_csv(args.out / "aa_flagged.csv", index=False, float_format="%.4f")
    shifted.to_csv(args.out / "shifted_power.csv", index=False)
    summary = power_summary(shifted)
    summary.to_csv(args.out / "shifted_power_summary.csv", index=False, float_format="%.4f")
    print(
        f"{len(pairs)} pairs of {len(reports)} reports: per-row 95 % coverage "
        f"{pairs.covered_95.sum() / pairs.rows_with_interval.sum():.3f} (of the rows with an interval); "
        f"pairs with a false REGRESSION {(pairs.false_regressions > 0).sum()}, "
        f"with a false IMPROVEMENT {(pairs.false_improvements > 0).sum()}; "
        f"without the core-placement probe {(pairs.false_regressions_unprobed > 0).sum()} and "
        f"{(pairs.false_improvements_unprobed > 0).sum()}; of {pairs.rows.sum()} row-pairs "
        f"{pairs.rows_placement_covariate.sum()} on mixed placements (a verdict kept only where the fit at equal "
        "placement agrees), "
        f"{pairs.rows_placement_confounded.sum()} not judged (placement and side coincide)"
    )
    for line in summary.itertuples():
        print(
            f"  +{line.slowdown_pct} %: op rows flagged {line.op_rows_flagged}/{line.op_rows} "
            f"({line.p_regression_op_row:.3f}; without the probe {line.p_regression_op_row_unprobed:.3f}), "
            f"pairs with another row flagged {line.pairs_other_flagged}/{line.pairs}, "
            f"median op detectable_80 {line.op_detectable_80_median:.3f}"
        )


if __name__ == "__main__":
    main()
