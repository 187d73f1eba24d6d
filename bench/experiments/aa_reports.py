"""The A/A check of separate reports: N reports of one commit, compared pairwise as `bench.compare` compares them.

    python -m bench.experiments.aa_reports [--reports 10] [--processes 3] [--full] [--out reports/power_curves]

Each report measures this checkout in fresh processes (one round each, as a
plain full `invoke bench` does; the quick grid unless --full), one after the
other. Every pair of them is then compared unpaired with moderated variances:
any REGRESSION or IMPROVEMENT is a false alarm, and each row's interval at
95 % (per row) either covers 1 or not. Writes ``aa_pairs.csv`` (one line per
pair) and prints the coverage and the false-alarm rate. N reports give
N (N - 1) / 2 pairs, not independent ones: they share reports, so the rate
has the uncertainty of about N / 2 pairs.
"""

from __future__ import annotations

import argparse
import io
import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console

from bench.report.schema import read_samples
from bench.stats import compare
from env.paths import REPO_ROOT, reports_dir

ROW_ALPHA = 0.05  # the coverage is read at 95 % per row


def judge_pair(base: Path, new: Path) -> dict:
    """One A/A pair: family-wise false alarms, and the per-row 95 % intervals that cover 1."""
    comparison = compare.compare_reports(base, new)
    counted = [r for r in comparison.rows if r.key[0] != compare.LIMIT_WORKLOAD]
    base_samples, new_samples = read_samples(base), read_samples(new)
    keys = [r.key for r in counted]
    priors = compare.kind_priors(keys, base_samples, new_samples, False)
    rng = np.random.default_rng(0)
    covered = 0
    for key in keys:
        row = compare.compare_samples(
            key, base_samples[key], new_samples[key], 0.0, ROW_ALPHA, rng, False, priors.get(compare.kind_of(key))
        )
        covered += (not math.isnan(row.ci_low)) and row.ci_low <= 1 <= row.ci_high
    return {
        "base": base.name,
        "new": new.name,
        "rows": len(counted),
        "false_regressions": sum(r.verdict == compare.REGRESSION for r in counted),
        "false_improvements": sum(r.verdict == compare.IMPROVEMENT for r in counted),
        "covered_95": covered,
    }


def judge_all(reports: list[Path]) -> pd.DataFrame:
    return pd.DataFrame([judge_pair(a, b) for a, b in itertools.combinations(reports, 2)])


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reports", type=int, default=10)
    parser.add_argument("--processes", type=int, default=3, help="processes per report (default 3, a full run's)")
    parser.add_argument("--full", action="store_true", help="the full grid (default: the quick grid)")
    parser.add_argument("--out", type=Path, default=reports_dir() / "power_curves")
    parser.add_argument("--workspace", type=Path, default=REPO_ROOT / "build" / "aa_reports")
    args = parser.parse_args(argv)
    if args.reports < 2 or args.processes < 2:
        parser.error("--reports and --processes must be >= 2")
    pairs = judge_all(measure(args.reports, args.processes, args.full, args.workspace))
    args.out.mkdir(parents=True, exist_ok=True)
    pairs.to_csv(args.out / "aa_pairs.csv", index=False)
    rows = pairs.rows.sum()
    print(
        f"{len(pairs)} pairs of {args.reports} reports: per-row 95 % coverage {pairs.covered_95.sum() / rows:.3f}; "
        f"pairs with a false REGRESSION {(pairs.false_regressions > 0).mean():.3f}, "
        f"with a false IMPROVEMENT {(pairs.false_improvements > 0).mean():.3f}"
    )


if __name__ == "__main__":
    main()
