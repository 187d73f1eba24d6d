"""How often `bench --quick --against HEAD` cries wolf, and how often it catches a real slowdown, on this machine.

    invoke bench.ab-measure [--aa 5] [--slowdowns 10,20] [--runs 5] [--reuse]

This checkout is copied into a scratch repository (bench/scratch.py) as commit
"clean" and measured:
  * A/A: the clean commit `--against HEAD` (itself, built a second time apart):
    every REGRESSION is a false alarm;
  * slowdowns: for each percent P, a commit on top of clean whose fused op
    (the torch adapter's CPU impl) busy-waits, on leaving each call, P % of
    the time the call took (slowed_impl says what that covers), measured
    `--against` clean: the op's rows should be flagged, and no other row.
    Every run is judged at --threshold (default: the gate's), as the gate
    judges it. (Before the verdict read significance and relevance apart, a
    slowdown of P % was judged at P/2 %: the whole interval had to lie past it.)
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

from bench import ab, scratch
from bench.compare import DEFAULT_THRESHOLD, INCONCLUSIVE, LIMIT_WORKLOAD, REGRESSION
from bench.report import read_report
from bench.run import BenchOptions
from env.paths import REPO_ROOT

IMPL = "csrc/torch/torch_cpu_impl.cpp"
OP_BASELINE = "fused"  # the rows that run torch.ops.myops.fused_norm(_out) on the CPU
GAP_CAP_US = 20  # a longer gap between two calls is not one call's framework overhead ...
# ... unless it is under this share of the time inside: releasing the previous call's output happens
# between the calls and grows with the output (a 4 MiB output is unmapped, pages returned to the OS).
GAP_INSIDE_SHARE = 0.25
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


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def slowed_impl(source: str, percent: float) -> str:
    """The CPU impl with each call made ``percent`` % slower, the framework's share of the call included.

    On leaving a call it busy-waits ``percent`` % of the call's period: the
    time inside the C++ implementation (checks, allocation, kernel) plus the
    gap since the previous call left it, which back to back is the time
    Python and the dispatcher take to get from one call into the next, and
    the release of the previous call's output. A gap longer than GAP_CAP_US
    and than GAP_INSIDE_SHARE of the inside time is not a call's overhead
    (the first call of a block, or a model's other layers between two
    norms), so only the inside time counts then. Without the share, the
    allocating call at 4 MiB (inside about 2.2 ms, its previous output's
    release about 0.26 ms) was slowed by 8 % where 10 % was asked. Measured
    call by call: on a machine whose load changes the op's time, a wait sized
    beforehand would be another share of it in every run. An op row is then
    ``percent`` % slower whatever its shape; a model row by ``percent`` % of
    the norms' share of the model.
    """
    entries = (
        '  check_norm_args("fused_norm", x, weight, bias, eps);\n',
        '  check_norm_args("fused_norm_out", x, weight, bias, eps);\n',
    )
    if not all(source.count(entry) == 1 for entry in entries):
        raise SystemExit(f"{IMPL} changed: cannot place the injected wait - update bench/ab_measure.py")
    helper = (
        "#include <algorithm>\n#include <chrono>\nnamespace {\n"
        "// A deliberate slowdown (bench/ab_measure.py): on leaving the call, busy-wait a share of its period.\n"
        f"constexpr double kInjectedShare = {percent / 100!r};\n"
        f"constexpr std::chrono::nanoseconds kGapCap{{{GAP_CAP_US * 1000}}};\n"
        f"constexpr double kGapInsideShare = {GAP_INSIDE_SHARE!r};\n"
        "using Clock = std::chrono::steady_clock;\n"
        "thread_local Clock::time_point last_exit{};\n"
        "struct InjectedWait {\n"
        "  Clock::time_point start = Clock::now();\n"
        "  ~InjectedWait() {\n"
        "    const auto now = Clock::now();\n"
        "    const auto gap = start - last_exit;\n"
        "    const auto inside = now - start;\n"
        "    const auto gap_cap = std::max<Clock::duration>(\n"
        "        kGapCap, std::chrono::duration_cast<Clock::duration>(inside * kGapInsideShare));\n"
        "    const auto period = inside + (gap < gap_cap ? gap : Clock::duration::zero());\n"
        "    const auto until = now + std::chrono::duration_cast<std::chrono::nanoseconds>(period * kInjectedShare);\n"
        "    while (Clock::now() < until) {\n    }\n"
        "    last_exit = Clock::now();\n"
        "  }\n};\n}  // namespace\n"
    )
    source = source.replace('#include "torch_adapter.h"\n', '#include "torch_adapter.h"\n' + helper, 1)
    for entry in entries:
        source = source.replace(entry, "  const InjectedWait injected_wait;\n" + entry, 1)
    return source


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


def _build(tree: ab.Tree, console: Console) -> None:
    started = time.perf_counter()
    scratch.build(tree.root, tree.build, tree.root.parent / f"{tree.root.name}-build.log")
    console.print(f"built {tree.root} in {time.perf_counter() - started:.0f} s (load {_load()})", highlight=False)


def add_slowdown(workspace: Workspace, clean: str, percent: float) -> str:
    """A commit on top of clean whose fused op is ``percent`` % slower, checked out apart; returns its tree's name."""
    name = f"slow{percent:g}"
    source = scratch.git("show", f"{clean}:{IMPL}", cwd=workspace.repo)
    text = slowed_impl(source, percent)
    scratch.git("checkout", "--quiet", "-B", name, clean, cwd=workspace.repo)
    try:
        sha = scratch.commit_change(workspace.repo, IMPL, text, f"fused op {percent:g}% slower")
    finally:
        scratch.git("checkout", "--quiet", "--detach", clean, cwd=workspace.repo)
    scratch.checkout(sha, workspace.tree(name).root, workspace.repo)
    return name


def build_all(workspace: Workspace, clean: str, names: list[str], console: Console) -> None:
    """Every tree a run needs, built at once: clean, REF (clean again, where `bench --against` looks), the slowed ones.

    Concurrent builds: on a shared machine they finish sooner together than one after the other.
    """
    ref = ab.Tree(
        scratch.checkout(clean, workspace.ref_cache / clean / "src", workspace.repo),
        workspace.ref_cache / clean / "build",
    )
    trees = [workspace.tree("clean"), ref, *(workspace.tree(n) for n in names)]
    with ThreadPoolExecutor(len(trees)) as pool:
        for future in [pool.submit(_build, tree, console) for tree in trees]:
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
    load_before, started_utc, started = _load(), datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), time.perf_counter()
    quiet = Console(file=io.StringIO(), width=250)
    result = ab.run_ab(ref, options, quiet, threshold=threshold, new=tree, ref_cache=workspace.ref_cache)
    wall = time.perf_counter() - started
    comparison = result.comparison  # both stages: a suspect row carries its confirmation's verdict
    rows = [r for r in comparison.rows if r.key[0] != LIMIT_WORKLOAD]
    flagged = [r for r in comparison.regressions]
    # The op's own rows (an op shape, the op alone in the timed call), and model rows whose norms are the op.
    op_rows = [r for r in rows if r.key[3] == OP_BASELINE and r.key[0] == "op"]
    model_op_rows = [r for r in rows if r.key[3] == OP_BASELINE and r.key[0] != "op"]
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
        "load_after": _load(),
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
                "now_op": sum(r.key[3] == OP_BASELINE and r.key[0] == "op" for r in flagged),
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--aa", type=int, default=5, help="A/A runs (default 5)")
    parser.add_argument(
        "--slowdowns", default="10,20", help="injected slowdowns in percent, a comma list (default 10,20)"
    )
    parser.add_argument("--runs", type=int, default=5, help="runs per slowdown (default 5)")
    parser.add_argument(
        "--threshold", type=float, default=DEFAULT_THRESHOLD, help="every run's threshold (default the gate's, 0.03)"
    )
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "reports" / "ab_measure")
    parser.add_argument("--workspace", type=Path, default=REPO_ROOT / "build" / "ab_measure")
    parser.add_argument("--reuse", action="store_true", help="resume in an existing workspace (its commit and builds)")
    parser.add_argument(
        "--rejudge", action="store_true", help="judge the recorded runs again with this checkout's compare; no runs"
    )
    args = parser.parse_args(argv)
    if args.rejudge:
        print(rejudge(args.out).to_string(index=False))
        return
    percents = [float(p) for p in args.slowdowns.split(",") if p.strip()]
    console = Console(width=200)
    workspace = Workspace(args.workspace.resolve())
    options = BenchOptions(quick=True, out_dir=workspace.runs)
    clean = prepare(workspace, args.reuse, console)
    console.print(f"scratch repository {workspace.repo} at {clean}; load {_load()}", highlight=False)
    slowed = {p: add_slowdown(workspace, clean, p) for p in percents}
    build_all(workspace, clean, list(slowed.values()), console)
    done = {"aa": 0, **{p: 0 for p in percents}}
    if args.reuse and (args.out / "results.csv").exists():
        # Resume: count the runs already recorded, so the numbering and the totals carry on.
        counts = pd.read_csv(args.out / "results.csv").kind.value_counts()
        done = {"aa": int(counts.get("aa", 0)), **{p: int(counts.get(f"slow{p:g}", 0)) for p in percents}}
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
                    f"slow{percent:g}",
                    workspace.tree(slowed[percent]),
                    clean,
                    args.threshold,
                    done[percent],
                    options,
                    console,
                )
                append(args.out, line)
