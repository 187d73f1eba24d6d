"""The readable end of a run: one table, the targets, what was skipped or failed, where the files are."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

from bench.measure.machine import BUSY_SHARE
from bench.report.metrics import PAGE_FAULT_BOUND, fault_cost_us, page_fault_bound
from bench.report.targets import evaluate_targets


def _fmt(value: float, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def summary_table(frame) -> Table:
    table = Table(
        title="median per call (µs); speed-up = unfused median / this median; % copy: of the fresh-output copy for "
        "allocating calls, of the copy into a preallocated buffer otherwise; PF = page-fault bound",
        show_lines=False,
    )
    for name, justify in (
        ("device", "left"),
        ("workload", "left"),
        ("shape", "left"),
        ("dtype", "left"),
        ("baseline", "left"),
        ("variant", "left"),
        ("n", "right"),
        ("median µs", "right"),
        ("p99 µs", "right"),
        ("IQR µs", "right"),
        ("GB/s", "right"),
        ("% copy", "right"),
        ("speed-up", "right"),
        ("setup s", "right"),
        ("faults/call", "right"),
        ("PF", "left"),
    ):
        table.add_column(name, justify=justify)
    bound = page_fault_bound(frame)
    for r, is_bound in zip(frame.itertuples(), bound, strict=True):
        table.add_row(
            r.device,
            r.workload,
            r.shape,
            r.dtype,
            r.baseline,
            r.variant,
            str(r.n),
            _fmt(r.median_us, ".2f"),
            _fmt(r.p99_us, ".2f"),
            _fmt(r.iqr_us, ".2f"),
            _fmt(r.gbps, ".1f"),
            _fmt(100 * r.copy_share, ".0f"),
            _fmt(r.speedup_vs_unfused, ".2f"),
            _fmt(r.setup_s, ".2f"),
            _fmt(r.minor_faults_per_call, ".0f"),
            f"[yellow]PF {100 * r.page_fault_share:.0f}%[/]" if is_bound else "",
        )
    return table


def page_fault_line(frame) -> str | None:
    """Which rows measure the OS serving fresh pages rather than the code; None when none do."""
    bound = frame[page_fault_bound(frame)]
    if bound.empty:
        return None
    rows = ", ".join(f"{r.baseline}/{r.variant} {r.shape}" for r in bound.itertuples())
    return (
        f"[yellow]{len(bound)} row(s) page-fault bound[/] "
        f"(over {100 * PAGE_FAULT_BOUND:.0f}% of the median serving page faults "
        f"at {fault_cost_us(frame):.2f} µs per fault, measured in this run with x.clone() vs a preallocated copy; "
        f"transparent huge pages: {frame.thp.iloc[0]}; allocator: {frame.cpu_allocator.iloc[0]}): {rows}. "
        "Their time is the OS's: compare them only on the same machine, or use the out variant"
    )


def print_summary(outcome, console: Console) -> None:
    if outcome.frame is not None:
        console.print(summary_table(outcome.frame))
        targets = evaluate_targets(outcome.frame)
        if targets:
            console.print("[bold]targets[/] (ratios within this run and device; CPU: fp32 rows)")
            for target in targets:
                mark = (
                    "[green]met[/]"
                    if target.met
                    else ("[red]MISSED[/]" if target.met is False else "[yellow]not measured[/]")
                )
                console.print(f"  {mark}  {target.name}: {target.detail}")
        faults = page_fault_line(outcome.frame)
        if faults:
            console.print(faults, highlight=False)
    for line in outcome.skipped:
        console.print(f"[yellow]skipped[/] {line}")
    for line in outcome.failures:
        console.print(f"[red bold]FAILED[/] {line}")
    if outcome.frame is not None and outcome.frame.other_cpu_share.notna().any():
        share = outcome.frame.other_cpu_share
        busy = int((share > BUSY_SHARE).sum())
        line = "other processes' share of the CPU while timing: "
        f"median {100 * share.median():.0f}%, max {100 * share.max():.0f}%"
        console.print(
            line
            + (f" - [yellow]{busy} row(s) above {100 * BUSY_SHARE:.0f}%: re-run on a quiet machine[/]" if busy else "")
        )
    if outcome.paths is not None:
        console.print(f"report  {outcome.paths.csv}\nsamples {outcome.paths.samples}\nplot    {outcome.paths.plot}")
    console.print(
        f"{outcome.seconds:.0f} s; "
        + (f"[red]{len(outcome.failures)} failure(s)[/]" if outcome.failures else "no failures")
    )
