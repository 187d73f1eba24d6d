"""bench/ab.py's process scheduling and statistics with fake workers: fast, no build, no subprocess per side.

A fake worker answers the driver's requests as bench/ab_worker.py does and
writes a real report whose samples come from a known distribution. Each
process carries its own offset (the bias a process's buffer layout or thread
placement gives it), so whether a process-level bias reads as a build effect
can be tested directly.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from bench import ab
from bench.ab_worker import PROTOCOL
from bench.compare import INCONCLUSIVE, REGRESSION, SAME, compare_reports
from bench.report import SCHEMA_VERSION, RowSamples, read_samples
from bench.run import BenchOptions
from tests.helpers.bench_synthetic import make_key, synthetic_report

KEYS = [make_key(shape=s, baseline=b) for s in ("1x8x512", "8x128x1024") for b in ("fused", "unfused")]
MEDIANS = {k: 10.0 * (i + 1) for i, k in enumerate(KEYS)}
JOBS = 3


class FakeWorker:
    """Speaks the worker protocol in-process; samples = median x the process's offset x lognormal noise."""

    started: list[tuple[str, int]] = []

    def __init__(self, label: str, log: Path, offset: float, rng: np.random.Generator, fields=None) -> None:
        self.label, self.log, self.offset, self.rng = label, log, offset, rng
        self.fields = fields or [f for f in vars(BenchOptions()) ]
        self.hello = {"protocol": PROTOCOL, "schema_version": SCHEMA_VERSION}
        self.jobs_run: list[int] = []
        self.plan: dict = {}

    def ask(self, request: dict) -> dict:
        what = request["do"]
        if what == "fields":
            return {"options": self.fields}
        if what == "plan":
            self.plan = request
            return {"jobs": JOBS, "rounds": request["options"]["rounds"], "pid": 0}
        if what == "job":
            self.jobs_run.append(request["index"])
            return {"seconds": 0.01}
        if what == "record":
            assert self.jobs_run == list(range(JOBS))  # every job, once, in order
            samples = {k: RowSamples.single_round(m * self.offset * self.rng.lognormal(0, 0.05, 200)) for k, m in MEDIANS.items()}
            csv = synthetic_report(Path(request["out_dir"]) / "report.csv", samples)
            return {"csv": str(csv), "failures": [], "skipped": []}
        raise AssertionError(what)

    def close(self) -> None:
        pass


def _measure(tmp_path: Path, offsets: dict[str, list[float]], seed: int, processes: int = 4):
    rng = np.random.default_rng(seed)
    started: list[FakeWorker] = []

    def start(label: str, tree: ab.Tree, log: Path) -> FakeWorker:
        worker = FakeWorker(label, log, offsets[label][len([w for w in started if w.label == label])], rng)
        started.append(worker)
        return worker

    sides = {"NEW": ab.Tree(tmp_path / "new"), "BASE": ab.Tree(tmp_path / "base")}
    console = Console(file=io.StringIO(), width=200)
    measured = ab.measure_processes(sides, BenchOptions(quick=True), processes, tmp_path / f"run{seed}", console, start)
    return measured, started


def test_processes_start_in_alternating_pairs_with_their_own_page_offsets(tmp_path):
    measured, started = _measure(tmp_path, {"NEW": [1.0] * 4, "BASE": [1.0] * 4}, seed=1)
    assert [w.label for w in started] == ["NEW", "BASE", "BASE", "NEW", "NEW", "BASE", "BASE", "NEW"]
    offsets = [w.plan["page_offset"] for w in started]
    assert offsets == [0, 0, 1024, 1024, 2048, 2048, 3072, 3072]  # one per pair, spread over the page
    assert all(w.plan["options"]["rounds"] == 4 for w in started)  # each process takes 1/4 of the budget
    log = pd.read_csv(tmp_path / "run1" / "processes.csv")
    assert list(log.page_offset) == offsets and list(log.side) == [w.label for w in started]
    # Pooled: one round per process, so compare sees 4 units a side.
    for label in ("NEW", "BASE"):
        samples = read_samples(measured.csv[label])
        assert sorted(samples) == sorted(KEYS)
        assert all(sorted(np.unique(s.rounds)) == [0, 1, 2, 3] and len(s.values) == 800 for s in samples.values())


@pytest.mark.parametrize("seed", range(5))
def test_a_20_percent_offset_of_one_process_is_never_a_regression(tmp_path, seed):
    # One of NEW's processes is 20 % slower, as a process with an unlucky layout is; the builds are the same.
    measured, _ = _measure(tmp_path, {"NEW": [1.2, 1.0, 1.0, 1.0], "BASE": [1.0] * 4}, seed)
    comparison = compare_reports(measured.csv["BASE"], measured.csv["NEW"], paired=True)
    verdicts = {r.verdict for r in comparison.rows}
    assert verdicts <= {SAME, INCONCLUSIVE} and not comparison.regressions
    assert all(r.units == 4 and r.paired for r in comparison.rows)


def test_a_20_percent_slowdown_in_every_process_is_a_regression(tmp_path):
    measured, _ = _measure(tmp_path, {"NEW": [1.2] * 4, "BASE": [1.0] * 4}, seed=7)
    comparison = compare_reports(measured.csv["BASE"], measured.csv["NEW"], paired=True)
    assert [r.verdict for r in comparison.rows] == [REGRESSION] * len(KEYS)
    assert all(1.15 < r.ratio < 1.25 for r in comparison.rows)


def test_the_same_offset_in_one_process_of_the_old_single_process_design_was_a_regression(tmp_path):
    # Why processes are the unit: with one process a side, the same process bias is in every sample.
    measured, _ = _measure(tmp_path, {"NEW": [1.2, 1.2], "BASE": [1.0, 1.0]}, seed=3, processes=2)
    comparison = compare_reports(measured.csv["BASE"], measured.csv["NEW"], paired=True)
    assert {r.verdict for r in comparison.rows} == {REGRESSION}
