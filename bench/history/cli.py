"""``invoke bench.history``: ingest, judge, print; optionally Parquet, a site, and the exit code of ``--check``.

Exit codes: 0 done (and, with --check, no open regression); 1 --check found a
REGRESSION in the latest report of a machine and run options; 2 bad input (a
folder that does not exist, a bad labels file).

Reports under an advisory folder (``--advisory``) are ingested, judged against
their machine's previous and printed, but never fail ``--check`` and never
stand in for the latest report of the history. CI's own quick run is one: its
host is a VM of the same image and hardware facts as the committed reports'
(so the same machine by every column), on another day and beside other work,
and one such run read ONNX Runtime's rows at 8x128x1024 (in the last-level cache)
1.20-1.25x the quiet main job's, code unchanged (docs/comparisons.md).
Whether a commit slowed a row is the paired A/B gate's question, both builds
on one host.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bench.history.changepoints import MIN_SHIFT, all_changes
from bench.history.export import export_parquet
from bench.history.labels import DEFAULT_LABELS, Labels
from bench.history.regressions import (
    DEFAULT_ALPHA,
    DEFAULT_THRESHOLD,
    advisory_regressions,
    judge_history,
    open_regressions,
)
from bench.history.store import connect, ingest
from bench.stats.verdicts import DEFAULT_THRESHOLD as PAIRED_THRESHOLD
from env.paths import build_dir, reports_dir

EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT = 0, 1, 2


@dataclass
class HistoryOptions:
    roots: list[Path] = field(default_factory=lambda: [reports_dir()])
    db: Path | None = None  # default build/history.duckdb
    labels: Path | None = DEFAULT_LABELS
    check: bool = False
    advisory: list[Path] = field(default_factory=list)  # judged and shown, never failing --check
    site: Path | None = None
    export_parquet: Path | None = None
    threshold: float = DEFAULT_THRESHOLD
    alpha: float = DEFAULT_ALPHA


def default_db() -> Path:
    return build_dir() / "history.duckdb"


def main(options: HistoryOptions, console: Console | None = None) -> int:
    console = console or Console(width=None if Console().is_terminal else 200)
    missing = [str(r) for r in options.roots if not Path(r).is_dir()]
    if missing:
        console.print(f"[red bold]bench.history: no such folder: {escape(', '.join(missing))}[/]", highlight=False)
        return EXIT_BAD_INPUT
    try:
        labels = Labels.read(options.labels)
    except (ValueError, KeyError, OSError) as error:
        console.print(f"[red bold]bench.history: {escape(str(error))}[/]", highlight=False)
        return EXIT_BAD_INPUT
    db = options.db or default_db()
    con = connect(db)
    try:
        result = ingest(con, options.roots, labels)
        judged = judge_history(con, options.threshold, options.alpha)
        runs = con.execute("SELECT count(*) FROM runs").fetchone()[0]
        console.print(
            f"{db}: {runs} reports ({result.added} new, {result.already} already in), "
            f"{judged} rows judged; {result.not_reports} CSVs that are not reports passed over",
            highlight=False,
        )
        for bad in result.invalid:
            console.print(
                f"[yellow]skipped, not a valid report:[/] {escape(str(bad.path))}: {escape(bad.reason)}",
                highlight=False,
            )
        changes = all_changes(con, MIN_SHIFT)
        _print_changes(con, changes, console)
        regressions = open_regressions(con, options.advisory)
        _print_regressions(regressions, console)
        if options.advisory:
            _print_advisory(advisory_regressions(con, options.advisory), console)
        if options.export_parquet:
            written = export_parquet(con, options.export_parquet)
            console.print(f"Parquet: {len(written)} tables under {options.export_parquet}", highlight=False)
        if options.site:
            from bench.history.site.build import build_site

            index = build_site(con, options.site, PAIRED_THRESHOLD, changes, options.advisory)
            console.print(f"site: {index}", highlight=False)
    finally:
        con.close()
    if options.check and len(regressions):
        return EXIT_REGRESSION
    return EXIT_OK


def _print_changes(con, changes, console: Console) -> None:
    if changes.empty:
        console.print(f"level shifts: none of {MIN_SHIFT:.0%} or more")
        return
    labels = dict(con.execute("SELECT machine_key, label FROM machines").fetchall())
    table = Table(
        title="level shifts in a row's medians (binary segmentation over the runs of one machine and run options)"
    )
    for name in ("machine", "row", "from commit", "size", "points"):
        table.add_column(name)
    for c in changes.itertuples():
        row = " ".join((c.workload, c.shape, c.dtype, c.baseline, c.variant, c.device, c.layout))
        commit = c.sha[:10] + ("-dirty" if c.dirty else "")
        cells = (labels.get(c.machine_key, c.machine_key), row, commit, f"{c.size:.3f}x", str(c.points))
        table.add_row(*map(escape, cells))
    console.print(table)


def _print_regressions(regressions, console: Console) -> None:
    if regressions.empty:
        console.print("open regressions (latest report of each machine and run options): none - OK")
        return
    _regression_table(
        regressions,
        "[red bold]open regressions[/]: the latest report of a machine and run options against its previous",
        console,
    )


def _print_advisory(regressions, console: Console) -> None:
    if regressions.empty:
        console.print("advisory reports: no REGRESSION against their previous")
        return
    _regression_table(
        regressions,
        "[yellow]advisory reports[/] (not failing --check): REGRESSION rows against their machine's previous",
        console,
    )


def _regression_table(regressions, title: str, console: Console) -> None:
    table = Table(title=title)
    for name in ("machine", "report", "row", "ratio", "interval", "units"):
        table.add_column(name)
    for r in regressions.itertuples():
        row = " ".join((r.workload, r.shape, r.dtype, r.baseline, r.variant, r.device, r.layout))
        cells = (r.label, r.path, row, f"{r.ratio:.3f}", f"{r.ci_low:.3f}-{r.ci_high:.3f}", str(r.units))
        table.add_row(*map(escape, cells))
    console.print(table)
