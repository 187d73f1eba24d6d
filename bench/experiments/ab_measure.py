"""How often `bench --quick --against HEAD` cries wolf, and how often it catches a real slowdown, on this machine.

    invoke bench.ab-measure [--aa 5] [--slowdowns 10,20] [--runs 5] [--reuse]

This checkout is copied into a scratch repository (bench/ab/scratch.py) as commit
"clean" and measured:
  * A/A: the clean commit `--against HEAD` (itself, built a second time apart):
    every REGRESSION is a false alarm;
  * slowdowns: for each whole percent P, the clean commit built with the
    slowdown switch (FUSEDBENCH_SLOWDOWN_PERCENT=P, the compile definition
    FUSED_NORM_SLOWDOWN_PERCENT: the torch adapter's CPU entry points
    busy-wait, on leaving each call, P % of its period; csrc/torch/slowdown.h
    says what that covers), measured `--against` clean: the op's rows should
    be flagged, and no other row. No source is edited.
    Every run is judged at --threshold (default: the gate's), as the gate
    judges it.
The power curves over more slowdowns and comparisons are
bench/experiments/power_curves.py and power_measure.py.
Every tree is built once, all at once before the first run, and reused by all
runs (REF's build where `bench --against` looks for it, so no run rebuilds).
The runs are interleaved (an A/A, then each slowdown, ...), so results that
stop early still cover every kind. Each finished run appends a line to
``results.csv`` and rewrites ``results.md`` under --out, with the load
(``/proc/loadavg``) before and after it.
"""

from __future__ import annotations

import argparse
import csv
import io
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
from rich.console import Console

from bench.ab import driver as ab
from bench.ab import scratch
from bench.experiments.defaults import AB_MEASURE as DEFAULTS
from bench.experiments.rows import OP_BASELINE, is_op_row
from bench.plan.options import BenchOptions
from bench.report.schema import read_report
from bench.stats.compare import INCONCLUSIVE, LIMIT_WORKLOAD, REGRESSION
from env.builder.config import SLOWDOWN_TABLE_VARIABLE, SLOWDOWN_VARIABLE
from env.paths import REPO_ROOT, reports_dir

FIELDS = (
    "kind",
    "run",
    "threshold",
    "exit",
    "rows",
    "regressions",
    "flagged_rows",
    "op_rows",
    "op_rows_flagged",
    "model_op_rows_flagged",
    "op_rows_intervals",
    "other_rows_flagged",
    "inconclusive",
    "confirmed_rows",
    "max_ratio",
    "max_ratio_row",
    "median_detectable",
    "wall_s",
    "load_before",
    "load_after",
    "max_other_cpu",
    "started_utc",
    "folder",
)


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, recorded beside every run (a loaded machine widens every interval)."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


@dataclass
class Workspace:
    """The scratch repository, its builds and where A/B folders go; kept between invocations under build/."""

    root: Path

    @property
    def repo(self) -> Path:
        return self.root / "repo"

    @property
    def ref_cache(self) -> Path:
        return self.root / "ref"

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    def tree(self, name: str) -> ab.Tree:
        path = self.repo if name == "clean" else self.root / name
        return ab.Tree(path, path / "build")


def prepare(workspace: Workspace, reuse: bool, console: Console) -> str:
    """The scratch repository with this checkout as its clean commit; returns the commit.

    ``reuse``: keep a workspace made earlier (its commit and builds), so an
    interrupted measurement resumes without rebuilding.
    """
    if reuse and (workspace.repo / ".git").is_dir():
        return scratch.git("rev-parse", "HEAD", cwd=workspace.repo)
    if workspace.root.exists():
        shutil.rmtree(workspace.root)
    workspace.repo.mkdir(parents=True)
    return scratch.snapshot(workspace.repo)


def _build(tree: ab.Tree, console: Console, slowdown_percent: int = 0, table: Path | None = None) -> None:
    started = time.perf_counter()
    log = tree.root.parent / f"{tree.root.name}-build.log"
    variables = {SLOWDOWN_VARIABLE: str(slowdown_percent)}
    if slowdown_percent and table is not None:
        variables[SLOWDOWN_TABLE_VARIABLE] = str(table.resolve())
    scratch.build(tree.root, tree.build, log, variables=variables)
    took = time.perf_counter() - started
    console.print(f"built {tree.root} in {took:.0f} s (load {load_average()})", highlight=False)


def add_slowdown(workspace: Workspace, clean: str, percent: int) -> str:
    """The clean commit checked out apart, to be built ``percent`` % slower; returns its tree's name."""
    name = f"slow{percent}"
    scratch.checkout(clean, workspace.tree(name).root, workspace.repo)
    return name


def build_all(
    workspace: Workspace,
    clean: str,
    slowed: dict[int, str],
    console: Console,
    tables: dict[int, Path] | None = None,
) -> None:
    """Every tree a run needs, built at once: clean, REF (clean again, where `bench --against` looks), the slowed ones
    (``tables``: a slowdown's calibrated per-row table, bench/experiments/slowdown_calibration.py).

    Concurrent builds: on a shared machine they finish sooner together than one after the other.
    """
    src = scratch.checkout(clean, workspace.ref_cache / clean / "src", workspace.repo)
    ref = ab.Tree(src, ab.ref_build_dir(src))
    trees = [(workspace.tree("clean"), 0), (ref, 0), *((workspace.tree(n), p) for p, n in slowed.items())]
    with ThreadPoolExecutor(len(trees)) as pool:
        tables = tables or {}
        for future in [pool.submit(_build, tree, console, p, tables.get(p)) for tree, p in trees]:
            future.result()


def one_run(
    workspace: Workspace,
    kind: str,
    tree: ab.Tree,
    ref: str,
    threshold: float,
    index: int,
    options: BenchOptions,
    console: Console,
) -> dict:
    load_before, started = load_average(), time.perf_counter()
    started_utc = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    quiet = Console(file=io.StringIO(), width=250)
    result = ab.run_ab(ref, options, quiet, threshold=threshold, new=tree, ref_cache=workspace.ref_cache)
    wall = time.perf_counter() - started
    comparison = result.comparison  # both stages: a suspect row carries its confirmation's verdict
    rows = [r for r in comparison.rows if r.key[0] != LIMIT_WORKLOAD]
    flagged = [r for r in comparison.regressions]
    # The op's own rows (an op shape, the op alone in the timed call), and model rows whose norms are the op.
    op_rows = [r for r in rows if is_op_row(r.key)]
    model_op_rows = [r for r in rows if r.key[3] == OP_BASELINE and not is_op_row(r.key)]
    top = max(rows, key=lambda r: r.ratio)
    busy = max(read_report(result.new_csv).other_cpu_share.max(), read_report(result.base_csv).other_cpu_share.max())
    line = {
        "kind": kind,
        "run": index,
        "threshold": threshold,
        "exit": result.code,
        "rows": len(rows),
        "regressions": len(flagged),
        "flagged_rows": "; ".join(f"{'/'.join(r.key[3:5])} {r.key[0]} {r.key[1]} {r.ratio:.3f}" for r in flagged),
        "op_rows": len(op_rows),
        "op_rows_flagged": sum(r.verdict == REGRESSION for r in op_rows),
        "op_rows_intervals": "; ".join(
            f"{r.key[4]} {r.key[1]} {r.ratio:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}]" for r in op_rows + model_op_rows
        ),
        "model_op_rows_flagged": f"{sum(r.verdict == REGRESSION for r in model_op_rows)}/{len(model_op_rows)}",
        "other_rows_flagged": sum(r.key[3] != OP_BASELINE for r in flagged),
        "inconclusive": sum(r.verdict == INCONCLUSIVE for r in rows),
        "confirmed_rows": "; ".join(
            f"{'/'.join(r.key[3:5])} {r.key[0]} {r.key[1]} {r.ratio:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}] {r.verdict}"
            for r in rows
            if r.confirmed
        ),
        "max_ratio": round(top.ratio, 3),
        "max_ratio_row": f"{'/'.join(top.key[3:5])} {top.key[0]} {top.key[1]}",
        "median_detectable": round(float(pd.Series([r.detectable_80 for r in rows]).median()), 3),
        "wall_s": round(wall),
        "load_before": load_before,
        "load_after": load_average(),
        "max_other_cpu": round(float(busy), 3),
        "started_utc": started_utc,
        "folder": str(result.folder),
    }
    console.print(
        f"{kind} run {index}: exit {result.code}, {len(flagged)} regression(s), op rows flagged "
        f"{line['op_rows_flagged']}/{len(op_rows)}, {wall:.0f} s, load {load_before} -> {line['load_after']}",
        highlight=False,
    )
    return line


def append(out: Path, line: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.csv"
    new = not path.exists()
    with open(path, "a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        if new:
            writer.writeheader()
        writer.writerow(line)
    write_markdown(pd.read_csv(path), out / "results.md")


def _again(runs: pd.DataFrame) -> str:
    """How many runs had a second stage (rows measured again), or "-" for runs recorded before it existed."""
    if "confirmed_rows" not in runs:
        return "-"
    return f"{int(runs.confirmed_rows.fillna('').astype(str).str.len().gt(0).sum())}/{len(runs)}"


def write_markdown(frame: pd.DataFrame, path: Path) -> None:
    """One line per kind: runs, how many were clean / fully flagged, wall time, load."""
    lines = [
        "| kind | threshold | runs | runs with 0 false regressions | runs with every op row flagged | "
        "op rows flagged | other rows flagged | inconclusive rows (mean) | runs with rows measured again | "
        "wall s (median) | load 1-min (range) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, runs in frame.groupby("kind", sort=False):
        slowdown = kind != "aa"
        false_free = int((runs.other_rows_flagged == 0).sum()) if slowdown else int((runs.regressions == 0).sum())
        all_op = int((runs.op_rows_flagged == runs.op_rows).sum()) if slowdown else "-"
        loads = [float(v.split()[0]) for v in list(runs.load_before) + list(runs.load_after)]
        lines.append(
            f"| {kind} | {runs.threshold.iloc[0]:g} | {len(runs)} | {false_free}/{len(runs)} | "
            f"{f'{all_op}/{len(runs)}' if slowdown else '-'} | "
            f"{int(runs.op_rows_flagged.sum())}/{int(runs.op_rows.sum())} | "
            f"{int(runs.other_rows_flagged.sum()) if slowdown else int(runs.regressions.sum())} | "
            f"{runs.inconclusive.mean():.1f} | {_again(runs)} | "
            f"{runs.wall_s.median():.0f} | {min(loads):.1f}-{max(loads):.1f} |"
        )
    path.write_text("\n".join(lines) + "\n")


def rejudge(out: Path) -> pd.DataFrame:
    """Every recorded run judged again by this checkout's compare (its current rules) from the run's pooled reports.

    Writes ``rejudged.md`` beside ``results.csv``: per run, the regressions as recorded and as judged now.
    Runs whose folder is gone (another machine's workspace) are listed as not available.
    """
    results = pd.read_csv(out / "results.csv")
    lines = []
    for run in results.itertuples():
        folder = Path(run.folder)
        base, new = folder / "base" / "pooled.csv", folder / "new" / "pooled.csv"
        if not (base.is_file() and new.is_file()):
            lines.append({"kind": run.kind, "run": run.run, "recorded": run.regressions, "now": "n/a", "now_op": "n/a"})
            continue
        comparison = ab.rejudge_folder(folder, run.threshold)
        flagged = comparison.regressions
        lines.append(
            {
                "kind": run.kind,
                "run": run.run,
                "recorded": run.regressions,
                "now": len(flagged),
                "now_op": sum(is_op_row(r.key) for r in flagged),
            }
        )
    frame = pd.DataFrame(lines)
    table = [
        "| kind | run | regressions as recorded | regressions judged now | of them op rows |",
        "|---|---|---|---|---|",
        *(f"| {r.kind} | {r.run} | {r.recorded} | {r.now} | {r.now_op} |" for r in frame.itertuples()),
    ]
    (out / "rejudged.md").write_text("\n".join(table) + "\n")
    return frame


def parse_percents(text: str) -> list[int]:
    """ "10,20" -> [10, 20]; ValueError naming --slowdowns for anything but whole percents from 1 to 100."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() and 1 <= int(p) <= 100 for p in parts):
        raise ValueError(f"--slowdowns must be whole percents from 1 to 100, comma-separated (as 10,20), got {text!r}")
    return [int(p) for p in parts]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--aa", type=int, default=DEFAULTS["aa"], help="A/A runs")
    parser.add_argument(
        "--slowdowns", default=DEFAULTS["slowdowns"], help="injected slowdowns in whole percent, a comma list"
    )
    parser.add_argument("--runs", type=int, default=DEFAULTS["runs"], help="runs per slowdown")
    parser.add_argument(
        "--threshold", type=float, default=DEFAULTS["threshold"], help="every run's threshold (default the gate's)"
    )
    parser.add_argument("--out", type=Path, default=reports_dir() / "ab_measure")
    parser.add_argument("--workspace", type=Path, default=REPO_ROOT / "build" / "ab_measure")
    parser.add_argument("--reuse", action="store_true", help="resume in an existing workspace (its commit and builds)")
    parser.add_argument(
        "--rejudge", action="store_true", help="judge the recorded runs again with this checkout's compare; no runs"
    )
    args = parser.parse_args(argv)
    if args.rejudge:
        print(rejudge(args.out).to_string(index=False))
        return
    percents = parse_percents(args.slowdowns)
    console = Console(width=200)
    workspace = Workspace(args.workspace.resolve())
    options = BenchOptions(quick=True, out_dir=workspace.runs)
    clean = prepare(workspace, args.reuse, console)
    console.print(f"scratch repository {workspace.repo} at {clean}; load {load_average()}", highlight=False)
    slowed = {p: add_slowdown(workspace, clean, p) for p in percents}
    build_all(workspace, clean, slowed, console)
    done = {"aa": 0, **{p: 0 for p in percents}}
    if args.reuse and (args.out / "results.csv").exists():
        # Resume: count the runs already recorded, so the numbering and the totals carry on.
        counts = pd.read_csv(args.out / "results.csv").kind.value_counts()
        done = {"aa": int(counts.get("aa", 0)), **{p: int(counts.get(f"slow{p}", 0)) for p in percents}}
    while done["aa"] < args.aa or any(done[p] < args.runs for p in percents):
        if done["aa"] < args.aa:
            done["aa"] += 1
            append(
                args.out,
                one_run(workspace, "aa", workspace.tree("clean"), "HEAD", args.threshold, done["aa"], options, console),
            )
        for percent in percents:
            if done[percent] < args.runs:
                done[percent] += 1
                line = one_run(
                    workspace,
                    f"slow{percent}",
                    workspace.tree(slowed[percent]),
                    clean,
                    args.threshold,
                    done[percent],
                    options,
                    console,
                )
                append(args.out, line)
