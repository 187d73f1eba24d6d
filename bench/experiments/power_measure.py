"""The measured points of the power curves: runs of each comparison against commits made slower on purpose.

    python -m bench.experiments.power_measure [--kinds quick,full,separate] [--slowdowns 0,2,3,5,10,20]
        [--runs 10] [--out reports/power_curves] [--reuse] [--table 5=reports/power/.../table.csv]

This checkout is copied into a scratch repository as commit "clean"; for each
slowdown P the clean commit is checked out apart and built with the build-time
switch at P (FUSEDBENCH_SLOWDOWN_PERCENT; csrc/torch/slowdown.h: every call of
the torch op busy-waits P % of its period), so no source text is edited. A
``--table P=CSV`` builds P's tree with a calibration's per-row percents
(bench/experiments/slowdown_calibration.py), so each op row is P % slower. Every
tree is built once, at once, and reused. Then, interleaved so
that a stopped measurement still covers every point:
  * quick   `bench --quick --against clean` from the slowed tree (P = 0: clean
            against itself, an A/A run);
  * full    the same without --quick (12 pairs over the full grid);
  * separate  a full report of clean and one of the slowed tree, made apart in
            3 processes each, compared unpaired as `bench.compare` does (P = 0:
            two reports of clean).
Each run appends a line to ``measured_runs.csv`` (its op rows' verdicts,
ratios and intervals, the other rows flagged, wall time, load), and the
per-point summary is rewritten into ``measured.csv``, which
bench/experiments/power_curves.py draws as measured points. The op rows'
ratios in the slowed runs are the injection's delivered slowdown: the
calibration check (``delivered`` in the summary) reads them against the asked P.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from scipy.stats import t as student_t

from bench.ab import driver as ab
from bench.experiments.ab_measure import Workspace, add_slowdown, build_all, load_average, prepare
from bench.experiments.rows import is_op_row
from bench.plan.options import BenchOptions
from bench.stats import compare
from env.paths import REPO_ROOT, reports_dir

KINDS = {"quick": "quick A/B", "full": "full A/B", "separate": "separate full reports, 3 processes"}
FIELDS = (
    "comparison",
    "slowdown_pct",
    "run",
    "exit",
    "op_rows",
    "op_rows_flagged",
    "other_rows_flagged",
    "op_rows_intervals",
    "wall_s",
    "load_before",
    "load_after",
    "started_utc",
    "folder",
)


def slowed_trees(
    workspace: Workspace, clean: str, percents: list[int], console: Console, tables: dict[int, Path] | None = None
) -> dict[int, str]:
    """Per slowdown P > 0, the clean commit checked out apart and built with the switch at P (and P's table, if
    ``tables`` has one); the trees' names."""
    trees = {p: add_slowdown(workspace, clean, p) for p in percents if p}
    build_all(workspace, clean, trees, console, tables)
    return trees


def parse_tables(texts: list[str]) -> dict[int, Path]:
    """``--table`` values (P=CSV) as {P: path}; ValueError naming the bad one."""
    tables = {}
    for text in texts:
        percent, _, path = text.partition("=")
        if not percent.strip().isdigit() or not path or not Path(path).is_file():
            raise ValueError(f"--table wants P=CSV with a whole percent and an existing file, got {text!r}")
        tables[int(percent)] = Path(path)
    return tables


def _line(comparison: compare.Comparison, kind: str, percent: int, run: int, code: int, started: float) -> dict:
    rows = [r for r in comparison.rows if r.key[0] != compare.LIMIT_WORKLOAD]
    op_rows = [r for r in rows if is_op_row(r.key)]
    return {
        "comparison": KINDS[kind],
        "slowdown_pct": percent,
        "run": run,
        "exit": code,
        "op_rows": len(op_rows),
        "op_rows_flagged": sum(r.verdict == compare.REGRESSION for r in op_rows),
        "other_rows_flagged": sum(r.verdict == compare.REGRESSION for r in rows if r not in op_rows),
        "op_rows_intervals": "; ".join(
            f"{r.key[4]} {r.key[1]} {r.key[6]} {r.ratio:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}] {r.verdict}"
            for r in op_rows
        ),
        "wall_s": round(time.perf_counter() - started),
    }


def one_ab(workspace: Workspace, kind: str, percent: int, run: int, clean: str, trees: dict) -> dict:
    started = time.perf_counter()
    options = BenchOptions(quick=kind == "quick", out_dir=workspace.runs)
    new = workspace.tree("clean") if percent == 0 else workspace.tree(trees[percent])
    ref = "HEAD" if percent == 0 else clean
    result = ab.run_ab(ref, options, Console(file=io.StringIO(), width=250), new=new, ref_cache=workspace.ref_cache)
    return {**_line(result.comparison, kind, percent, run, result.code, started), "folder": str(result.folder)}


def full_report(workspace: Workspace, tree: ab.Tree, folder: Path) -> Path:
    """A full report of ``tree`` in 3 fresh processes, as a plain full `invoke bench` makes it."""
    from bench.run import FULL_RUN_PROCESSES

    console = Console(file=io.StringIO(), width=250)
    options = BenchOptions(quick=False, out_dir=workspace.runs)
    measured = ab.measure_processes({"RUN": tree}, options, FULL_RUN_PROCESSES, folder, console)
    if measured.csv["RUN"] is None:
        raise SystemExit(f"a full report of {tree.root} measured nothing (logs under {folder})")
    return measured.csv["RUN"]


def one_separate(workspace: Workspace, percent: int, run: int, trees: dict) -> dict:
    started = time.perf_counter()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    folder = workspace.runs / "separate" / f"{stamp}-{percent}"
    base = full_report(workspace, workspace.tree("clean"), folder / "base")
    new_tree = workspace.tree("clean") if percent == 0 else workspace.tree(trees[percent])
    new = full_report(workspace, new_tree, folder / "new")
    comparison = compare.compare_reports(base, new)
    code = 1 if comparison.regressions else 0
    return {**_line(comparison, "separate", percent, run, code, started), "folder": str(folder)}


def append(out: Path, line: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "measured_runs.csv"
    new = not path.exists()
    with open(path, "a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        if new:
            writer.writeheader()
        writer.writerow(line)
    recorded = pd.read_csv(path)
    summarise(recorded).to_csv(out / "measured.csv", index=False, float_format="%.4f")
    delivered_per_row(recorded).to_csv(out / "delivered.csv", index=False, float_format="%.4f")


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """One line per (comparison, slowdown): the columns power_curves.py reads, plus the delivered slowdown."""
    lines = []
    for (name, percent), group in runs.groupby(["comparison", "slowdown_pct"], sort=False):
        ratios = [float(part.split()[-4]) for text in group.op_rows_intervals.dropna() for part in text.split("; ")]
        lines.append(
            {
                "comparison": name,
                "slowdown_pct": percent,
                "source": "measured",
                "runs": len(group),
                "p_regression_op_row": group.op_rows_flagged.sum() / max(1, group.op_rows.sum()),
                "p_every_op_row": float((group.op_rows_flagged == group.op_rows).mean()),
                "p_false_alarm_run": float((group.other_rows_flagged > 0).mean()),
                "delivered_median": float(np.median(ratios)) if ratios else np.nan,
                "delivered_range": f"{min(ratios):.3f}-{max(ratios):.3f}" if ratios else "",
            }
        )
    return pd.DataFrame(lines)


DELIVERY_TOLERANCE = 0.01  # a calibrated slowdown delivers the asked one within +-1 percentage point


def delivered_per_row(runs: pd.DataFrame) -> pd.DataFrame:
    """Per comparison, slowdown and op row: the geometric mean of its ratio over the runs and the 95 % t
    interval of that mean. At P > 0 it is the injection's delivered slowdown, each run's interval (+-2-7 %
    on these rows) too wide alone to check a calibration to +-1 point; at P = 0 it is the A/A runs' bias."""
    lines = []
    for (name, percent), group in runs.groupby(["comparison", "slowdown_pct"], sort=False):
        per_row: dict[str, list[float]] = {}
        for text in group.op_rows_intervals.dropna():
            for part in text.split("; "):
                words = part.split()
                per_row.setdefault(" ".join(words[:-4]), []).append(math.log(float(words[-4])))
        for row, logs in per_row.items():
            mean = float(np.mean(logs))
            half = float(student_t.ppf(0.975, len(logs) - 1) * np.std(logs, ddof=1) / math.sqrt(len(logs)))
            half = half if len(logs) > 1 else math.nan
            low, high = math.exp(mean - half), math.exp(mean + half)
            lines.append(
                {
                    "comparison": name,
                    "slowdown_pct": percent,
                    "row": row,
                    "runs": len(logs),
                    "delivered": math.exp(mean),
                    "ci_low": low,
                    "ci_high": high,
                    # The asked change within the tolerance of the delivered one, and the interval that narrow.
                    "within_1_point": bool(abs(math.exp(mean) - 1 - percent / 100) <= DELIVERY_TOLERANCE),
                    "interval_within_1_point": bool(
                        1 + percent / 100 - DELIVERY_TOLERANCE <= low and high <= 1 + percent / 100 + DELIVERY_TOLERANCE
                    ),
                }
            )
    return pd.DataFrame(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", default="quick,full,separate", help="a comma list of quick, full, separate")
    parser.add_argument("--slowdowns", default="0,2,3,5,10,20", help="true slowdowns in percent, a comma list")
    parser.add_argument("--runs", type=int, default=10, help="runs per point (default 10)")
    parser.add_argument("--out", type=Path, default=reports_dir() / "power_curves")
    parser.add_argument("--workspace", type=Path, default=REPO_ROOT / "build" / "power_measure")
    parser.add_argument("--reuse", action="store_true", help="resume in an existing workspace (its commit and builds)")
    parser.add_argument(
        "--table", action="append", default=[], help="P=CSV: build P's tree with this calibrated per-row table"
    )
    args = parser.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    if not kinds or set(kinds) - set(KINDS):
        parser.error(f"--kinds must be a comma list of {', '.join(KINDS)}, got {args.kinds!r}")
    try:
        tables = parse_tables(args.table)
    except ValueError as error:
        parser.error(str(error))
    percents = [int(p) for p in args.slowdowns.split(",") if p.strip()]
    if not percents or min(percents) < 0:
        parser.error(f"--slowdowns must be integer percents >= 0, got {args.slowdowns!r}")
    if args.runs < 1:
        parser.error(f"--runs must be >= 1, got {args.runs}")
    console = Console(width=200)
    workspace = Workspace(args.workspace.resolve())
    clean = prepare(workspace, args.reuse, console)
    trees = slowed_trees(workspace, clean, percents, console, tables)
    done: dict[tuple[str, int], int] = {}
    if args.reuse and (args.out / "measured_runs.csv").exists():
        recorded = pd.read_csv(args.out / "measured_runs.csv")
        done = {(k, int(p)): len(g) for (k, p), g in recorded.groupby(["comparison", "slowdown_pct"])}
    for run in range(args.runs):
        for percent in percents:
            for kind in kinds:
                if done.get((KINDS[kind], percent), 0) > run:
                    continue
                load, started_utc = load_average(), datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                if kind == "separate":
                    line = one_separate(workspace, percent, run + 1, trees)
                else:
                    line = one_ab(workspace, kind, percent, run + 1, clean, trees)
                line.update(load_before=load, load_after=load_average(), started_utc=started_utc)
                append(args.out, line)
                console.print(
                    f"{KINDS[kind]} at {percent}% run {run + 1}: op rows flagged {line['op_rows_flagged']}/"
                    f"{line['op_rows']}, other rows {line['other_rows_flagged']}, {line['wall_s']} s",
                    highlight=False,
                )


if __name__ == "__main__":
    main()
