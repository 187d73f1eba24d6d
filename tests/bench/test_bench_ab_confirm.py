"""An A/B run's second stage: the rows the first leaves INCONCLUSIVE past a bound, measured again and judged alone.

Fake workers (tests/bench/test_bench_ab.py) write real reports from known
distributions: the fused rows of NEW are slower by a set factor, and each
process carries its own offset, so the first stage's pairs can be made noisy
and the second's quiet (or the other way round).
"""

from __future__ import annotations

import io
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from bench.ab import driver as ab
from bench.ab.confirm import confirm_options
from bench.plan.jobs import plan_jobs
from bench.plan.options import BenchOptions
from bench.report.schema import RowSamples
from bench.stats import compare
from bench.stats.compare import INCONCLUSIVE, REGRESSION, SAME, Comparison, RowComparison
from tests.bench.test_bench_ab import MEDIANS, FakeWorker
from tests.helpers.bench_synthetic import synthetic_report

FIRST = 10  # processes per side in the first stage
THRESHOLD = 0.05


class SlowedWorker(FakeWorker):
    """A fake worker whose fused rows take ``slowdown`` times as long."""

    def __init__(self, *args, slowdown: float = 1.0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.slowdown = slowdown

    def ask(self, request: dict) -> dict:
        if request["do"] != "record":
            return super().ask(request)
        noise = {k: self.rng.lognormal(0, 0.05, 200) for k in MEDIANS}
        factor = {k: self.offset * (self.slowdown if k.baseline == "fused" else 1.0) for k in MEDIANS}
        samples = {k: RowSamples.single_round(m * factor[k] * noise[k]) for k, m in MEDIANS.items()}
        csv = synthetic_report(Path(request["out_dir"]) / "report.csv", samples)
        return {"csv": str(csv), "failures": [], "skipped": []}


def _run(
    tmp_path: Path,
    first_slowdown: float,
    second_slowdown: float,
    first_spread: float,
    seed: int = 0,
    fields: list[str] | None = None,
):
    """An A/B run of fakes: in the first stage NEW's processes are off by +-first_spread (alternating, so the
    estimate stays put and the interval widens); in the second they are not."""
    rng = np.random.default_rng(seed)
    started: list[SlowedWorker] = []

    def start(label: str, tree: ab.Tree, log: Path) -> SlowedWorker:
        index = sum(w.label == label for w in started)
        first = index < FIRST
        offset = 1.0
        if label == "NEW" and first:
            offset = math.exp(first_spread * (1 if index % 2 else -1))
        slowdown = (first_slowdown if first else second_slowdown) if label == "NEW" else 1.0
        worker = SlowedWorker(label, log, offset, rng, fields=fields, slowdown=slowdown)
        started.append(worker)
        return worker

    sides = {"NEW": ab.Tree(tmp_path / "new"), "BASE": ab.Tree(tmp_path / "base")}
    console = Console(file=io.StringIO(), width=250)
    folder = tmp_path / "run"
    result = ab.measure_and_judge(
        sides, BenchOptions(quick=True), FIRST, folder, console, THRESHOLD, compare.DEFAULT_ALPHA, start
    )
    return result, started, (folder / "compare.txt").read_text()


def test_a_slowdown_the_first_stage_cannot_settle_is_confirmed_on_fresh_pairs(tmp_path):
    result, started, text = _run(tmp_path, 1.10, 1.10, first_spread=0.08)
    rows = {r.key: r for r in result.comparison.rows}
    fused = [k for k in rows if k[3] == "fused"]
    # Measured again: only the fused rows (estimate 1.10, past 1.05, interval too wide at 10 noisy pairs).
    assert {k for k, r in rows.items() if r.confirmed} == set(fused)
    assert all(rows[k].verdict == REGRESSION and rows[k].units == ab.CONFIRM_PROCESSES for k in fused), text
    assert all(rows[k].verdict != REGRESSION for k in rows if k not in fused), text
    assert result.code == compare.EXIT_REGRESSION
    second = started[2 * FIRST :]
    assert len(second) == 2 * ab.CONFIRM_PROCESSES
    plan = second[0].plan["options"]
    # Only the suspect rows, each timed longer than in the first stage.
    assert plan["baseline"] == "fused" and [tuple(s) for s in plan["op_shapes"]] == [(1, 8, 512), (8, 128, 1024)]
    assert list(plan["rows"]) == ["op 1x8x512 float32 fused/call", "op 8x128x1024 float32 fused/call"]
    assert not plan["model_batches"] and plan["budget_s"] == pytest.approx(ab.CONFIRM_BUDGET_S * ab.CONFIRM_PROCESSES)
    assert "confirmation: the suspect rows in fresh pairs" in text
    assert "95% family-wise over both stages (96% on every row, 99% on the 2 row(s) measured again)" in text


def test_a_ref_without_row_lists_is_measured_again_on_the_suspects_jobs(tmp_path):
    fields = [name for name in vars(BenchOptions()) if name != "rows"]
    result, started, text = _run(tmp_path, 1.10, 1.10, first_spread=0.08, fields=fields)
    plan = started[-1].plan["options"]  # the first try started a pair and was refused before planning
    assert "rows" not in plan and list(plan["jobs"]) == ["op 1x8x512 float32 fused", "op 8x128x1024 float32 fused"]
    assert len(started) == 2 * FIRST + 2 + 2 * ab.CONFIRM_PROCESSES
    assert result.code == compare.EXIT_REGRESSION
    assert {r.key[3] for r in result.comparison.rows if r.confirmed} == {"fused"}, text


def test_a_ref_without_job_lists_is_measured_again_on_the_suspects_cases(tmp_path):
    # Its BenchOptions has neither "rows" nor "jobs": the second stage falls back to the product of the suspects'
    # cases.
    fields = [name for name in vars(BenchOptions()) if name not in ("jobs", "rows")]
    result, started, text = _run(tmp_path, 1.10, 1.10, first_spread=0.08, fields=fields)
    plan = started[-1].plan["options"]  # the first two tries started a pair each and were refused before planning
    assert "jobs" not in plan and plan["baseline"] == "fused"
    assert len(started) == 2 * FIRST + 4 + 2 * ab.CONFIRM_PROCESSES
    assert result.code == compare.EXIT_REGRESSION
    assert {r.key[3] for r in result.comparison.rows if r.confirmed} == {"fused"}, text


def test_a_first_stage_fluke_is_not_confirmed(tmp_path):
    # The first stage's pairs read the fused rows 10 % slow; fresh pairs of the same code do not.
    result, _, text = _run(tmp_path, 1.10, 1.0, first_spread=0.08)
    confirmed = [r for r in result.comparison.rows if r.confirmed]
    assert confirmed and all(r.verdict == SAME for r in confirmed), text
    assert result.code == compare.EXIT_OK and not result.comparison.regressions


def test_a_suspect_however_noisy_is_measured_again(tmp_path):
    # Pairs 30 % apart in the first stage: its interval for a 10 % slowdown is far too wide to say anything.
    # Fresh quiet pairs settle it.
    result, started, text = _run(tmp_path, 1.10, 1.10, first_spread=0.3)
    fused = [r for r in result.comparison.rows if r.key[3] == "fused"]
    assert len(started) == 2 * (FIRST + ab.CONFIRM_PROCESSES)
    assert fused and all(r.confirmed and r.verdict == REGRESSION for r in fused), text
    assert result.code == compare.EXIT_REGRESSION


def test_no_suspect_no_second_stage(tmp_path):
    result, started, text = _run(tmp_path, 1.0, 1.0, first_spread=0.0)
    assert len(started) == 2 * FIRST and not (tmp_path / "run" / "confirm").exists()
    assert result.code == compare.EXIT_OK
    assert "no row measured again" in text


def test_a_slowdown_the_first_stage_settles_is_not_measured_again(tmp_path):
    result, started, _ = _run(tmp_path, 1.25, 1.25, first_spread=0.0)
    assert len(started) == 2 * FIRST
    assert {r.key[3] for r in result.comparison.regressions} == {"fused"}
    assert not any(r.confirmed for r in result.comparison.rows)


def _row(key: tuple[str, ...], ratio: float, verdict: str, units: int = 10) -> RowComparison:
    return RowComparison(key, 1.0, ratio, ratio, 0.9, 1.3, units, True, 0.2, verdict)


def test_suspects_are_inconclusive_counted_rows_past_a_bound():
    op = ("op", "1x8x512", "float32", "fused", "call", "cpu", "natural")
    rows = [
        _row(op, 1.08, INCONCLUSIVE),
        _row(op[:4] + ("out", "cpu", "natural"), 1.01, INCONCLUSIVE),  # within the bound: nothing to confirm
        # Short of the threshold, past half of it: a change past it may read lower on its first pairs.
        _row(op[:4] + ("out", "cpu", "page_offset"), 1.035, INCONCLUSIVE),
        _row(op[:4] + ("call", "cpu", "page_offset"), 1 / 1.035, INCONCLUSIVE),
        _row(op[:3] + ("native", "call", "cpu", "natural"), 0.90, INCONCLUSIVE),  # past the lower bound: a gain?
        _row(("limit",) + op[1:], 1.2, INCONCLUSIVE),  # a limit row measures the machine: never counted
        _row(op[:3] + ("ort", "custom-run", "cpu", "natural"), 1.2, REGRESSION),  # already settled
        _row(op[:3] + ("unfused", "call", "cpu", "natural"), 1.2, INCONCLUSIVE, units=1),  # no interval at all
    ]
    assert compare.suspects(Comparison(rows), THRESHOLD) == [rows[0].key, rows[2].key, rows[3].key, rows[4].key]


def test_the_narrowed_grid_plans_exactly_the_suspects_jobs(tmp_path):
    keys = [
        ("op", "8x128x1024", "float32", "fused", "call", "cpu", "page_offset"),
        ("model", "1x32x128", "float32", "ort", "standard-run", "cpu", "page_offset"),
        ("add_norm", "4x64x768", "float32", "fused", "inplace", "cpu", "page_offset"),
    ]
    options = confirm_options(BenchOptions(quick=True), keys)
    # Only the op suspects' layout is planned (a layout other than the natural one names its job).
    assert options.layouts == "page_offset"
    jobs = plan_jobs(options, tmp_path)
    # No limits: a verdict reads a row's own time.
    assert [job.label for job in jobs] == [
        "op 8x128x1024 float32 page_offset fused",
        "add_norm 4x64x768 float32 fused",
        "model small 1x32 float32 ort",
    ]
    # Each job times its suspect row, not the baseline's other variants.
    for job, variant in zip(jobs[:2], ["call", "inplace"], strict=True):
        assert [v.name for _, _, v in job.measurements()] == [variant], job.label
    # A REF without row lists is sent the jobs alone: each with the limits it is read against.
    labels = [job.label for job in plan_jobs(replace(options, rows=None), tmp_path)]
    assert labels == [
        "limit dispatch floor",
        "op 8x128x1024 float32 page_offset copy",
        "op 8x128x1024 float32 page_offset fused",
        "add_norm 4x64x768 float32 fused",
        "model small 1x32 float32 ort",
    ], labels
    # A model row alone still plans one op shape (an empty override would mean the whole grid) but not its jobs.
    alone = confirm_options(BenchOptions(quick=True), keys[1:2])
    assert alone.op_shapes == ((1, 8, 512),) and alone.add_norm_shapes is None
    assert [job.label for job in plan_jobs(alone, tmp_path)] == ["model small 1x32 float32 ort"]
    with pytest.raises(ValueError, match="no rows"):
        confirm_options(BenchOptions(quick=True), [])


def test_a_job_list_naming_a_job_the_grid_lacks_is_refused(tmp_path):
    options = BenchOptions(quick=True, jobs=("op 8x128x1024 float32 fused", "op 3x3x3 float32 fused"))
    with pytest.raises(ValueError, match=r"3x3x3.*not in this grid"):
        plan_jobs(options, tmp_path)


def test_a_rows_job_key_names_the_job_the_plan_made(tmp_path):
    from bench.plan.jobs import JobKey

    labels = {job.label for job in plan_jobs(BenchOptions(quick=True, device="cpu", baseline="fused"), tmp_path)}
    assert JobKey.of_row("op", "8x128x1024", "float32", "fused", "cpu").label in labels
    placed = JobKey.of_row("op", "8x128x1024", "float32", "fused", "cpu", "page_offset").label
    assert placed == "op 8x128x1024 float32 page_offset fused" and placed in labels
    # Both layouts of an op suspect: both planned.
    both = [("op", "1x8x512", "float32", "fused", "out", "cpu", layout) for layout in ("natural", "page_offset")]
    assert confirm_options(BenchOptions(quick=True), both).layouts == "all"
    model = JobKey.of_row("model", "1x32x64", "float32", "fused", "cpu")  # batch x sequence x hidden
    assert model.case == "small 1x32" and model.label in labels
    assert JobKey.of_row("limit", "8x128x1024", "float32", "copy", "cpu") is None
    assert JobKey.of_row("op", "1x8x512", "bfloat16", "fused", "cuda").label == "cuda op 1x8x512 bfloat16 fused"
    with pytest.raises(ValueError, match="no model of the cpu grid"):
        JobKey.of_row("model", "3x5x64", "float32", "fused", "cpu")
    with pytest.raises(ValueError, match="shape must be positive integers"):
        JobKey.of_row("op", "8xx128", "float32", "fused", "cpu")
