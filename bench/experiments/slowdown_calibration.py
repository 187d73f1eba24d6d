"""Calibrate the slowdown switch per row, so a build asked to be P % slower reads P % slower on each op row.

    python -m bench.experiments.slowdown_calibration [--percent 10] [--iterations 3] [--processes 10]
        [--out reports/power/slowdown_calibration] [--reuse]

The switch (csrc/torch/slowdown.h) waits P % of each call's period, but a
comparison reads more than it asks on some rows (10 % asked: about 1.15x at
1x8x512, 1.08-1.10x at 8x128x1024): the wait's own cost and what it does to
the caches come on top. This checkout is copied into a scratch repository;
each iteration builds it with the switch at P and the table so far
($FUSEDBENCH_SLOWDOWN_TABLE, env/builder/config.py; none at first), measures it
against the clean build as the quick A/B run does (the fused op's rows only,
both sides by this checkout's harness), and derives each row's next percent
from a line fitted through every iteration's (percent, delivered) of that row
(``fitted_percent``: one run's interval is too wide to step from alone; an
interval wider than MAX_INTERVAL_WIDTH is left out). The table is keyed by
shape, dtype and entry point (the allocating call and the out variant read
about 2 points apart at one percent); a row's layouts share the key, so they
share the fit. ``--iterations 0`` refits the table from the recorded lines
without measuring, with ``--pooled`` also from the rows' ratios pooled over
power runs that used the table (fp32 op rows). Iteration k measures with
``table-<k>.csv`` (none for k = 0), appends its rows to ``calibration.csv`` and
writes the next table as ``table-<k+1>.csv`` and ``table.csv``; a run resumes
after the iterations ``calibration.csv`` holds. No source file is edited.
"""

from __future__ import annotations

import argparse
import csv
import io
import shutil
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from bench.ab import driver as ab
from bench.ab import scratch
from bench.experiments.ab_measure import load_average
from bench.experiments.rows import OP_BASELINE, is_op_row
from bench.measure.allocator import FIXED_MMAP
from bench.plan.options import BenchOptions
from env.builder.config import MAX_SLOWDOWN_PERCENT, SLOWDOWN_TABLE_VARIABLE, SLOWDOWN_VARIABLE
from env.paths import build_dir, reports_dir

TOLERANCE = 0.01  # delivered within +-1 percentage point of the asked change
NOISE_FLOOR = 0.002  # a delivered change below this says nothing about the row's percent
# An interval wider than this (ci_high - ci_low) measured nothing to set a percent from: beside other work the
# 8x128x1024 rows read 0.46-1.45 and 0.08-28 at 10 % asked, and keep their percent; the 1x8x512 rows' 0.09-0.12
# still move theirs toward the target (the estimate is unbiased; its interval is reported beside it).
MAX_INTERVAL_WIDTH = 0.25
FIELDS = (
    "iteration",
    "asked_percent",
    "shape",
    "dtype",
    "variant",
    "layout",
    "table_percent",
    "delivered",
    "ci_low",
    "ci_high",
    "within_tolerance",
    "next_percent",
    "load",
    "started_utc",
    "folder",
)


TableKey = tuple[str, str, str]  # shape, dtype, variant ("" for both entry points)


def read_table(path: Path | None) -> dict[TableKey, float]:
    """(shape, dtype, variant) -> percent of a table CSV (empty for None; a table without the variant
    column names both entry points)."""
    if path is None:
        return {}
    with open(path, newline="") as handle:
        return {(r["shape"], r["dtype"], r.get("variant") or ""): float(r["percent"]) for r in csv.DictReader(handle)}


def table_percent(table: dict[TableKey, float], shape: str, dtype: str, variant: str, asked: float) -> float:
    """The percent a build with ``table`` waits on this row: its own entry, else the entry for both, else P."""
    return table.get((shape, dtype, variant), table.get((shape, dtype, ""), asked))


def write_table(path: Path, table: dict[TableKey, float]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["shape", "dtype", "variant", "percent"])
        for (shape, dtype, variant), percent in sorted(table.items()):
            writer.writerow([shape, dtype, variant, f"{percent:.3f}"])


def next_percent(current: float, asked: float, delivered: float, interval: tuple[float, float] = (0, 0)) -> float:
    """The percent that delivers ``asked`` where ``current`` delivered ``delivered`` (a ratio, measured within
    ``interval``), if it says anything."""
    change = delivered - 1
    if change < NOISE_FLOOR or interval[1] - interval[0] > MAX_INTERVAL_WIDTH:
        return current
    return min(MAX_SLOWDOWN_PERCENT, current * (asked / 100) / change)


def fitted_percent(points: list[tuple[float, float, float, float]], asked: float) -> float | None:
    """The percent that delivers ``asked`` on a line fitted through every measured (percent, delivered, low,
    high) of one row; None where the points say nothing (all too wide, or no rise with the percent).

    One quick run's interval is +-2-7 % on these rows, so the proportional step from the last run alone
    jumps with the noise (8x128x1024: 8.4 % read 1.095, then 4.5 % read 1.032). A weighted least-squares
    line delivered - 1 = a + b * percent through all the runs (weights 1 / width^2) averages it out, and
    its intercept a is the switch's fixed cost (its clock reads), which the proportional rule ignores.
    """
    kept = [(p, d, hi - lo) for p, d, lo, hi in points if 0 < hi - lo <= MAX_INTERVAL_WIDTH]
    if not kept:
        return None
    weights = [1 / width**2 for _, _, width in kept]
    total = sum(weights)
    x_mean = sum(w * p for w, (p, _, _) in zip(weights, kept, strict=True)) / total
    y_mean = sum(w * (d - 1) for w, (_, d, _) in zip(weights, kept, strict=True)) / total
    spread = sum(w * (p - x_mean) ** 2 for w, (p, _, _) in zip(weights, kept, strict=True))
    if spread < 1e-9 * total:  # one percent measured: the proportional rule through the origin
        return next_percent(x_mean, asked, 1 + y_mean) if y_mean >= NOISE_FLOOR else None
    slope = sum(w * (p - x_mean) * (d - 1 - y_mean) for w, (p, d, _) in zip(weights, kept, strict=True)) / spread
    if slope <= 0:
        return None
    return min(MAX_SLOWDOWN_PERCENT, max(0.0, x_mean + (asked / 100 - y_mean) / slope))


def fitted_table(lines: list[dict], asked: float) -> dict[TableKey, float]:
    """Per (shape, dtype, variant), :func:`fitted_percent` over every line of every iteration at ``asked``
    (all layouts: the wait does not know the layout)."""
    grouped: dict[TableKey, list[tuple[float, float, float, float]]] = {}
    for line in lines:
        if float(line["asked_percent"]) != asked:
            continue
        key = (line["shape"], line["dtype"], line["variant"])
        grouped.setdefault(key, []).append(
            (float(line["table_percent"]), float(line["delivered"]), float(line["ci_low"]), float(line["ci_high"]))
        )
    fitted = {key: fitted_percent(points, asked) for key, points in grouped.items()}
    return {key: round(percent, 3) for key, percent in fitted.items() if percent is not None}


def pooled_lines(delivered_csv: Path, used: dict[TableKey, float], asked: float) -> list[dict]:
    """Calibration lines from power runs (bench/experiments/power_measure.py's ``delivered.csv``): each op row's
    ratio pooled over the runs at ``asked`` %, measured with the percents of ``used`` (the table their slowed
    build had). Their intervals are a few times narrower than one calibration run's, so the fit leans on them."""
    lines = []
    with open(delivered_csv, newline="") as handle:
        for row in csv.DictReader(handle):
            if float(row["slowdown_pct"]) != asked:
                continue
            variant, shape, _layout = row["row"].split()
            percent = table_percent(used, shape, "float32", variant, asked)
            lines.append(
                {
                    "asked_percent": str(asked),
                    "shape": shape,
                    "dtype": "float32",
                    "variant": variant,
                    "table_percent": str(percent),
                    **{k: row[k] for k in ("delivered", "ci_low", "ci_high")},
                }
            )
    return lines


def _build(tree: ab.Tree, log: Path, variables: dict[str, str], console: Console) -> None:
    started = time.perf_counter()
    scratch.build(tree.root, tree.build, log, variables=variables)
    took = time.perf_counter() - started
    console.print(f"built {tree.root} in {took:.0f} s (load {load_average()})", highlight=False)


def iterate(
    workspace: Path,
    clean: ab.Tree,
    iteration: int,
    asked: int,
    table: Path | None,
    processes: int,
    out: Path,
    console: Console,
) -> list[dict]:
    """One build with the switch at ``asked`` and ``table``, measured against ``clean``; its op rows' lines."""
    tree = ab.Tree(workspace / f"slow{asked}-{iteration}", workspace / f"slow{asked}-{iteration}" / "build")
    scratch.checkout(scratch.git("rev-parse", "HEAD", cwd=clean.root), tree.root, clean.root)
    variables = {SLOWDOWN_VARIABLE: str(asked), **({SLOWDOWN_TABLE_VARIABLE: str(table)} if table else {})}
    _build(tree, workspace / f"slow{asked}-{iteration}-build.log", variables, console)
    options = BenchOptions(baseline=OP_BASELINE, quick=True, model_batches=(), out_dir=out / "runs")
    load, started_utc = load_average(), datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    folder = reports_dir(options.out_dir) / "ab" / f"calibration-{asked}-{iteration}"
    folder.mkdir(parents=True, exist_ok=True)
    quiet = Console(file=io.StringIO(), width=250)
    result = ab.measure_and_judge(
        {"NEW": tree, "BASE": clean},
        replace(options, allocator=FIXED_MMAP),
        processes,
        folder,
        quiet,
        0.03,
        0.05,
    )
    current = read_table(table)
    lines = []
    for row in result.comparison.rows:
        workload, shape, dtype, baseline, variant, _device, layout = row.key
        if not is_op_row(row.key):
            continue
        percent = table_percent(current, shape, dtype, variant, float(asked))
        lines.append(
            {
                "iteration": iteration,
                "asked_percent": asked,
                "shape": shape,
                "dtype": dtype,
                "variant": variant,
                "layout": layout,
                "table_percent": round(percent, 3),
                "delivered": round(row.ratio, 4),
                "ci_low": round(row.ci_low, 4),
                "ci_high": round(row.ci_high, 4),
                "within_tolerance": abs(row.ratio - 1 - asked / 100) <= TOLERANCE,
                "next_percent": round(next_percent(percent, asked, row.ratio, (row.ci_low, row.ci_high)), 3),
                "load": f"{load} -> {load_average()}",
                "started_utc": started_utc,
                "folder": str(folder),
            }
        )
        console.print(
            f"iteration {iteration}: {variant} {shape} {dtype} {layout} at {percent:.2f} % delivered {row.ratio:.3f} "
            f"[{row.ci_low:.3f}, {row.ci_high:.3f}] (asked {1 + asked / 100:.2f})",
            highlight=False,
        )
    return lines


def append(path: Path, lines: list[dict]) -> None:
    new = not path.is_file()
    with open(path, "a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        if new:
            writer.writeheader()
        writer.writerows(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--percent", type=int, default=10, help="the asked slowdown, whole percent (default 10)")
    parser.add_argument(
        "--iterations", type=int, default=3, help="builds measured, each with the last table (0: refit only)"
    )
    parser.add_argument("--processes", type=int, default=ab.PROCESSES["quick"], help="A/B pairs per iteration")
    parser.add_argument("--out", default=None, help="report folder (default reports/power/slowdown_calibration)")
    parser.add_argument("--table", default=None, help="start from this table instead of none")
    parser.add_argument("--reuse", action="store_true", help="keep the scratch repository and clean build")
    parser.add_argument(
        "--pooled",
        default=None,
        help="with --iterations 0: also fit a power run's delivered.csv (measured with this folder's table.csv)",
    )
    args = parser.parse_args(argv)
    console = Console(width=200)
    out = (Path(args.out) if args.out else reports_dir() / "power" / "slowdown_calibration").resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.iterations == 0:  # refit only: nothing is built or measured
        if not (out / "calibration.csv").is_file():
            parser.error(f"--iterations 0 refits {out / 'calibration.csv'}, which does not exist")
        measured = list(csv.DictReader(open(out / "calibration.csv", newline="")))
        start = Path(args.table).resolve() if args.table else None
        if args.pooled:
            measured += pooled_lines(Path(args.pooled), read_table(out / "table.csv"), args.percent)
        write_table(out / "table.csv", {**read_table(start), **fitted_table(measured, args.percent)})
        console.print(f"refitted {out / 'table.csv'} from {len(measured)} recorded lines", highlight=False)
        return
    workspace = build_dir() / "slowdown_calibration"
    clean = ab.Tree(workspace / "repo", workspace / "repo" / "build")
    if not (args.reuse and (clean.build / "toolchain.json").is_file()):
        if workspace.exists():
            shutil.rmtree(workspace)
        clean.root.mkdir(parents=True)
        scratch.snapshot(clean.root)
        _build(clean, workspace / "clean-build.log", {}, console)
    # Resumes after the iterations calibration.csv holds, from the table the last one derived.
    done = (
        len({line["iteration"] for line in csv.DictReader(open(out / "calibration.csv"))})
        if (out / "calibration.csv").is_file()
        else 0
    )
    table = Path(args.table).resolve() if args.table else (out / f"table-{done}.csv")
    table = table if table.is_file() else None
    for iteration in range(done, done + args.iterations):
        lines = iterate(workspace, clean, iteration, args.percent, table, args.processes, out, console)
        append(out / "calibration.csv", lines)
        measured = list(csv.DictReader(open(out / "calibration.csv", newline="")))
        derived = {**read_table(table), **fitted_table(measured, args.percent)}
        table = out / f"table-{iteration + 1}.csv"  # table-k: the table iteration k measures with
        write_table(table, derived)
        write_table(out / "table.csv", derived)
        if all(line["within_tolerance"] for line in lines):
            console.print(f"every op row within +-{100 * TOLERANCE:g} % at iteration {iteration}", highlight=False)
            break


if __name__ == "__main__":
    main()
