"""What a person watching a run sees while it measures: live progress in a terminal, one line per job in a log.

In a terminal (rich's Console says so) a live display shows the jobs done out
of the total, the job being measured, the elapsed time and an estimate of the
time left. In a log or CI (no terminal) a live display would print nothing
readable, so each finished job gets one line instead: its number, its label,
its seconds, the elapsed time and the estimate. A job is one case with every
baseline measured on it (bench/plan/jobs.py): a group of report rows.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(int(round(seconds)), 60)
    return f"{minutes}:{seconds:02d}"


class RunProgress:
    """Progress of one run over ``total`` jobs (set or raised later with :meth:`set_total`)."""

    def __init__(self, console: Console, total: int = 0) -> None:
        self.console = console
        self.total = total
        self.done = 0
        self.started = time.perf_counter()
        self.live = console.is_terminal
        self._progress: Progress | None = None
        self._task = None

    def __enter__(self) -> RunProgress:
        self.started = time.perf_counter()
        if self.live:
            self._progress = Progress(
                TextColumn("jobs"),
                MofNCompleteColumn(),
                BarColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TextColumn("{task.description}"),
                console=self.console,
                transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task("", total=self.total or None)
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()

    def set_total(self, total: int) -> None:
        self.total = total
        if self._progress is not None:
            self._progress.update(self._task, total=total)

    def start_job(self, label: str) -> None:
        """The job now measured: shown live in a terminal; nothing in a log (its line comes when it ends)."""
        if self._progress is not None:
            self._progress.update(self._task, description=label, refresh=True)

    def eta_s(self) -> float | None:
        """Seconds left at the pace so far (None before the first job ends or without a total)."""
        if not self.done or not self.total:
            return None
        elapsed = time.perf_counter() - self.started
        return elapsed / self.done * max(0, self.total - self.done)

    def finish_job(self, label: str, seconds: float) -> None:
        self.done += 1
        if self._progress is not None:
            self._progress.update(self._task, advance=1, refresh=True)
            return
        eta = self.eta_s()
        self.console.print(
            f"[{self.done}/{self.total or '?'}] {label}: {seconds:.1f} s; "
            f"elapsed {_clock(time.perf_counter() - self.started)}"
            + (f", ETA {_clock(eta)}" if eta is not None else ""),
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
