"""Progress while a run measures: a live display in a terminal, one line per finished job in a log."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
from rich.console import Console

from bench.ab import driver as ab
from bench.plan.options import BenchOptions
from bench.report.progress import RunProgress
from tests.bench.test_bench_ab import JOBS, FakeWorker

LABELS = ["limit 1 float32 dispatch", "op 1x8x512 float32 fused,unfused", "op 8x128x1024 float32 fused,unfused"]


def _jobs(progress: RunProgress, labels: list[str], seconds: list[float]) -> None:
    for label, took in zip(labels, seconds, strict=True):
        progress.start_job(label)
        progress.finish_job(label, took)


def test_a_terminal_gets_a_live_display_of_jobs_done_the_current_job_elapsed_and_eta():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160)
    with RunProgress(console, total=4) as progress:
        assert progress.live
        _jobs(progress, LABELS[:2], [0.5, 1.5])
        progress.start_job(LABELS[2])
        shown = out.getvalue()
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown)  # the terminal's control sequences out
    assert "\x1b[" in shown  # drawn in place, not printed as lines
    assert "jobs 2/4" in plain and LABELS[2] in plain and "ETA" in plain
    assert re.search(r"0:00:0\d", plain)  # elapsed, h:mm:ss
    assert "[1/4]" not in plain  # no log lines in a terminal


def test_a_log_gets_one_line_per_finished_job_with_its_elapsed_time_and_eta():
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=80)
    with RunProgress(console, total=3) as progress:
        assert not progress.live
        _jobs(progress, LABELS, [0.25, 1.5, 2.0])
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and "\x1b[" not in out.getvalue()
    for number, (line, label, took) in enumerate(zip(lines, LABELS, ("0.2", "1.5", "2.0"), strict=True), 1):
        assert line.startswith(f"[{number}/3] {label}: {took} s; elapsed 0:0"), line
    assert "ETA" in lines[0] and lines[-1].endswith("ETA 0:00")  # nothing left after the last


def test_the_estimate_is_the_pace_so_far_times_the_jobs_left():
    progress = RunProgress(Console(file=io.StringIO()), total=10)
    assert progress.eta_s() is None  # no pace before the first job ends
    progress.started -= 4.0  # four seconds ago
    for _ in range(2):
        progress.finish_job("x", 2.0)
    assert 15.9 < progress.eta_s() < 16.5  # 2 jobs in 4 s: 8 jobs left, 16 s


def test_a_multi_process_run_reports_every_job_of_every_process(tmp_path: Path):
    rng = np.random.default_rng()

    def start(label: str, tree: ab.Tree, log: Path) -> FakeWorker:
        return FakeWorker(label, log, 1.0, rng)

    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    with RunProgress(console) as progress:
        ab.measure_processes(
            {"RUN": ab.Tree(tmp_path)}, BenchOptions(quick=True), 2, tmp_path / "run", console, start, progress=progress
        )
    job_lines = [line for line in out.getvalue().splitlines() if line.startswith("[")]
    assert progress.total == 2 * JOBS and progress.done == 2 * JOBS
    assert [line.split(":")[0] for line in job_lines] == [
        f"[{i}/{2 * JOBS}] process {1 + (i - 1) // JOBS}/2" for i in range(1, 2 * JOBS + 1)
    ]
