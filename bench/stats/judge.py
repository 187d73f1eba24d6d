"""The declared targets judged over several reports of one machine.

One run measures at one thread count, so the CPU targets "at 1 and 2
threads" and the 16-bit shares come from separate runs (a 1-thread full run,
a 2-thread run of the fused op and ORT, runs in bfloat16 and float16). Each
target's ratio is still taken between rows of one run: a row's key and thread
count may appear in only one of the reports, so every row a target pairs is
that run's own. Only the thread-scaling target sets rows of two runs side by
side, and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from rich.console import Console

from bench.report.schema import KEY_COLUMNS, ReportError, read_report
from bench.report.targets import VERDICT_MARKUP, TargetResult, evaluate_targets
from bench.stats.compare import LIMIT_WORKLOAD, MACHINE_COLUMNS, column_differences

# Thread count is what the runs are meant to differ in; every other machine fact must agree.
SHARED_MACHINE_COLUMNS = tuple(c for c in MACHINE_COLUMNS if c != "threads")


def combined_frame(paths: Sequence[Path | str]) -> pd.DataFrame:
    """The reports' rows in one frame; ReportError if their machines differ or a measured row repeats."""
    if not paths:
        raise ReportError("no report given")
    frames = [read_report(path) for path in paths]
    for path, frame in zip(paths[1:], frames[1:], strict=True):
        differences = column_differences(frames[0], frame, SHARED_MACHINE_COLUMNS)
        if differences:
            raise ReportError(f"{path} is from another machine than {paths[0]}: {'; '.join(differences)}")
    labelled = [frame.assign(report=str(path)) for path, frame in zip(paths, frames, strict=True)]
    rows = pd.concat(labelled, ignore_index=True)
    # Limit rows (the copies) are measured by every run and only read through each run's own copy_share.
    measured = rows[rows.workload != LIMIT_WORKLOAD]
    repeated = measured.duplicated([*KEY_COLUMNS, "threads"], keep=False)
    if repeated.any():
        first = measured.loc[repeated].iloc[0]
        reports = sorted(set(measured.loc[repeated, "report"]))
        raise ReportError(
            f"{repeated.sum()} rows are in more than one report at the same thread count (first: "
            f"{'/'.join(str(first[c]) for c in KEY_COLUMNS)}, {int(first.threads)} threads, in {', '.join(reports)}): "
            "give each row's run once"
        )
    return rows


def judge(paths: Sequence[Path | str]) -> list[TargetResult]:
    """Every declared target over the reports' rows together (the CPU's per thread count)."""
    return evaluate_targets(combined_frame(paths))


def main(paths: Sequence[str], console: Console | None = None) -> int:
    """Print each target's verdict; exit code 0 when none is missed, 1 when one is, 2 for unusable reports."""
    console = console or Console()
    try:
        results = judge(paths)
    except ReportError as error:
        console.print(f"[red]bench.targets:[/] {error}", highlight=False)
        return 2
    for result in results:
        mark = VERDICT_MARKUP[result.verdict]
        console.print(f"  {mark}  {result.name}: {result.detail}", highlight=False)
    return 1 if any(result.met is False for result in results) else 0
