"""bench/stats/judge.py: the targets over several reports of one machine (`invoke bench.targets`)."""

from __future__ import annotations

import numpy as np
import pytest
from rich.console import Console

from bench.report.schema import ReportError
from bench.stats.judge import combined_frame, judge, main
from tests.helpers.bench_synthetic import lognormal, make_key, synthetic_report

SHAPES = ("1x8x512", "8x128x1024")
MACHINE = {"machine_id": "m1", "cpu_model": "cpu", "torch": "2.13.0"}


@pytest.fixture
def rng(generator):
    return np.random.default_rng(int(generator.initial_seed()))


def _run(path, rng, threads, speed, variants=("out", "call"), **machine):
    samples = {
        tuple(make_key(shape, "fused", variant)): lognormal(rng, speed * (1 + i), 30)
        for i, shape in enumerate(SHAPES)
        for variant in variants
    }
    return synthetic_report(path, samples, environment={**MACHINE, "threads": threads, **machine})


def test_two_runs_give_the_thread_target(tmp_path, rng):
    one = _run(tmp_path / "one.csv", rng, threads=1, speed=100.0)
    two = _run(tmp_path / "two.csv", rng, threads=2, speed=60.0)
    frame = combined_frame([one, two])
    assert sorted(frame.threads.unique()) == [1, 2] and len(frame) == 8
    (result,) = [r for r in judge([one, two]) if "2 threads vs 1" in r.name]
    assert result.met is True and result.detail.count("2/1 threads 0.") == 4
    slower = _run(tmp_path / "slower.csv", rng, threads=2, speed=150.0)
    (result,) = [r for r in judge([one, slower]) if "2 threads vs 1" in r.name]
    assert result.met is False
    text = Console(record=True, width=300)
    assert main([str(one), str(slower)], text) == 1
    assert "MISSED" in text.export_text()


def test_reports_of_other_machines_or_repeated_rows_are_refused(tmp_path, rng):
    one = _run(tmp_path / "one.csv", rng, threads=1, speed=100.0)
    other = _run(tmp_path / "other.csv", rng, threads=2, speed=60.0, cpu_model="another cpu")
    with pytest.raises(ReportError, match="another machine.*cpu_model: cpu -> another cpu"):
        combined_frame([one, other])
    again = _run(tmp_path / "again.csv", rng, threads=1, speed=100.0, variants=("out",))
    with pytest.raises(ReportError, match="4 rows are in more than one report at the same thread count"):
        combined_frame([one, again])
    text = Console(record=True, width=300)
    assert main([str(one), str(tmp_path / "missing.csv")], text) == 2
    assert "no such report file" in text.export_text()
