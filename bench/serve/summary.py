"""The serving summary: the table, the best configuration, where oversubscription starts to hurt, the targets."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
from rich.console import Console
from rich.table import Table

from bench.measure.machine import BUSY_SHARE
from bench.serve.configs import COMPARISON_CLIENTS, SWEEP_ROUTE

PLAIN_VS_POOLED_TARGET = 1.2  # pooled IO binding throughput / plain session.run, small shape, 2 clients
TAIL_TARGET = 3.0  # best configuration's P99 / P50


def serve_rows(frame: pd.DataFrame) -> pd.DataFrame:
    rows = frame[frame.workload == "serve"].copy()
    rows["busy_threads"] = rows.sessions * rows.intra_op_threads
    rows["tail_ratio"] = rows.p99_us / rows.median_us
    return rows


def best_row(rows: pd.DataFrame):
    """The highest throughput among configurations with no mismatch and no error."""
    clean = rows[(rows.mismatches == 0) & (rows.errors == 0)]
    return None if clean.empty else clean.loc[clean.requests_per_s.idxmax()]


@dataclass(frozen=True)
class Knee:
    clients: int
    best_within: float  # req/s: best with sessions x threads <= cores
    within_config: str
    first_over: str  # the oversubscribed configuration measured with the fewest busy threads
    over_rps: float
    change: float  # over_rps / best_within - 1


def knees(rows: pd.DataFrame) -> list[Knee]:
    """Per client count of the sweep: best throughput within the cores vs the least oversubscribed point."""
    sweep = rows[(rows.baseline == "ort") & rows.variant.str.startswith(f"{SWEEP_ROUTE}-pooled")]
    found = []
    for clients, group in sweep.groupby("clients"):
        cores = int(group.physical_cores.iloc[0])
        within, over = group[group.busy_threads <= cores], group[group.busy_threads > cores]
        if within.empty or over.empty:
            continue
        best = within.loc[within.requests_per_s.idxmax()]
        least = over[over.busy_threads == over.busy_threads.min()]
        first = least.loc[least.requests_per_s.idxmax()]
        found.append(
            Knee(
                int(clients),
                float(best.requests_per_s),
                best.variant,
                first.variant,
                float(first.requests_per_s),
                float(first.requests_per_s / best.requests_per_s - 1),
            )
        )
    return found


def _comparison_pairs(rows: pd.DataFrame) -> dict[str, tuple]:
    """route -> (plain row, pooled row) at the comparison setting."""
    pairs = {}
    comparison = rows[(rows.baseline == "ort") & (rows.clients == COMPARISON_CLIENTS) & (rows.sessions == 1)]
    threads = comparison.intra_op_threads.min() if len(comparison) else None
    for route in ("standard", "opset23", "custom"):
        pick = comparison[comparison.intra_op_threads == threads]
        run = pick[pick.variant.str.startswith(f"{route}-run-")]
        pooled = pick[pick.variant.str.startswith(f"{route}-pooled-")]
        if len(run) and len(pooled):
            pairs[route] = (run.iloc[0], pooled.iloc[0])
    return pairs


def pooled_vs_plain(rows: pd.DataFrame) -> dict[str, float]:
    """route -> pooled req/s / plain req/s at the comparison setting."""
    return {
        route: float(pooled.requests_per_s / run.requests_per_s)
        for route, (run, pooled) in _comparison_pairs(rows).items()
    }


def _f(value, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def serve_table(rows: pd.DataFrame) -> Table:
    best = best_row(rows)
    table = Table(
        title="serving: throughput and per-request latency (µs); * = best; ! = sessions x threads > physical cores; "
        "other CPU = share of all cores other processes used meanwhile"
    )
    for name in (
        "",
        "baseline",
        "configuration",
        "clients",
        "sess x thr",
        "spin",
        "req/s",
        "P50",
        "P90",
        "P99",
        "max",
        "P99/P50",
        "mismatch",
        "errors",
        "other CPU",
    ):
        table.add_column(name, justify="left" if name in ("baseline", "configuration") else "right")
    for r in rows.itertuples():
        mark = "*" if best is not None and r.variant == best.variant and r.baseline == best.baseline else ""
        over = "!" if r.busy_threads > r.physical_cores else ""
        table.add_row(
            mark,
            r.baseline,
            r.variant,
            str(r.clients),
            f"{r.sessions}x{r.intra_op_threads}{over}",
            str(r.allow_spinning),
            _f(r.requests_per_s, ".0f"),
            _f(r.median_us, ".0f"),
            _f(r.p90_us, ".0f"),
            _f(r.p99_us, ".0f"),
            _f(r.max_us, ".0f"),
            _f(r.tail_ratio, ".2f"),
            str(r.mismatches),
            str(r.errors),
            _f(100 * r.other_cpu_share, ".0f") + "%",
        )
    return table


def print_serve_summary(outcome, console: Console) -> None:
    if outcome.frame is not None:
        rows = serve_rows(outcome.frame)
        console.print(serve_table(rows))
        best = best_row(rows)
        if best is not None:
            console.print(
                f"best: {best.baseline}/{best.variant}: {best.requests_per_s:.0f} req/s, P50 {best.median_us:.0f} µs, "
                f"P99 {best.p99_us:.0f} µs (P99/P50 {best.tail_ratio:.2f})"
            )
        for knee in knees(rows):
            verb = "costs" if knee.change < 0 else "gains"
            console.print(
                f"oversubscription at {knee.clients} clients: best within {outcome.cores} cores {knee.within_config} "
                f"{knee.best_within:.0f} req/s; first past them {knee.first_over} {knee.over_rps:.0f} req/s "
                f"({verb} {100 * abs(knee.change):.0f}%)"
            )
        console.print("[bold]serving targets[/] (ratios from this run)")
        for route, (run, pooled) in _comparison_pairs(rows).items():
            ratio = pooled.requests_per_s / run.requests_per_s
            mark = "[green]met[/]" if ratio >= PLAIN_VS_POOLED_TARGET else "[red]MISSED[/]"
            # What the pool can save is per-request overhead outside the model; the medians show how much that is.
            saved = run.median_us - pooled.median_us
            console.print(
                f"  {mark}  pooled IO binding / plain session.run, {route}, {COMPARISON_CLIENTS} clients: {ratio:.2f}x "
                f"(target >= {PLAIN_VS_POOLED_TARGET}x); median per request {run.median_us:.0f} -> "
                f"{pooled.median_us:.0f} µs ({saved:+.0f} µs saved, {100 * saved / run.median_us:+.0f}%)"
            )
        if best is not None:
            mark = "[green]met[/]" if best.tail_ratio <= TAIL_TARGET else "[red]MISSED[/]"
            console.print(f"  {mark}  best configuration's P99/P50: {best.tail_ratio:.2f} (target <= {TAIL_TARGET})")
        bad = int((rows.mismatches != 0).sum())
        console.print(
            f"  {'[green]met[/]' if bad == 0 else '[red]MISSED[/]'}  mismatches 0 in every configuration "
            f"({int(rows.mismatches.sum())} in all, {len(rows)} configurations, {int(rows.requests.sum())} requests)"
        )
        busy = rows[rows.other_cpu_share > BUSY_SHARE]
        if len(busy):
            console.print(
                f"[yellow]{len(busy)} of {len(rows)} rows ran while other processes used more than "
                f"{100 * BUSY_SHARE:.0f}% of the CPU (median {100 * rows.other_cpu_share.median():.0f}%): "
                "their throughput measures the neighbours; re-run on a quiet machine before reading the knee[/]"
            )
    for line in outcome.failures:
        console.print(f"[red bold]FAILED[/] {line}")
    if outcome.paths is not None:
        console.print(f"report  {outcome.paths.csv}\nsamples {outcome.paths.samples}\nplot    {outcome.paths.plot}")
    console.print(
        f"{outcome.seconds:.0f} s; "
        + (f"[red]{len(outcome.failures)} failure(s)[/]" if outcome.failures else "no failures")
    )
