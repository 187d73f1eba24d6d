"""The whole harness on a tiny grid: rows, samples, ratios, environment, plot, selection."""

from __future__ import annotations

import gc
import io
import re
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch
from rich.console import Console

from bench.measure.timing import TimingConfig, timer_resolution_ns
from bench.plan.jobs import Job, plan_jobs
from bench.plan.limits import LimitCase
from bench.plan.options import MIN_SAMPLES, ROUND_FLOOR_CAP, ROUNDS, BenchOptions
from bench.plan.registry import Variant, all_baselines, register, select
from bench.report.schema import KEY_COLUMNS, ReportPaths, read_report, read_samples
from bench.report.summary import print_summary
from bench.rounds import Results, RunSettings, run_round
from bench.run import run_bench
from env.paths import REPO_ROOT, reports_dir

TINY_SHAPES = ((1, 4, 64), (2, 8, 128))
TINY_MODEL = (("tiny", 1, 4),)


def _run(tmp_path, **kwargs):
    options = BenchOptions(
        **{"warmup": 3, "budget_s": 0.01, "threads": 1, "out_dir": tmp_path, "device": "cpu", **kwargs}
    )
    return run_bench(options, Console(file=io.StringIO(), width=200))


def _keys(frame) -> set[tuple[str, ...]]:
    return {tuple(k) for k in frame[list(KEY_COLUMNS)].values.tolist()}


@pytest.fixture(scope="module")
def torch_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("reports")
    return tmp_path, _run(tmp_path, baseline="unfused,fused,native", op_shapes=TINY_SHAPES, model_batches=TINY_MODEL)


def test_tiny_grid_writes_one_row_per_baseline_variant_and_case(torch_run):
    tmp_path, outcome = torch_run
    assert outcome.failures == [] and outcome.skipped == []
    frame = read_report(outcome.paths.csv)
    floor = ("cpu", "natural")  # the floors place nothing
    expected = {("limit", "1", "float32", "dispatch", v, *floor) for v in ("torch_noop", "ort_identity_iobinding")}
    expected.add(("limit", "1x16", "float32", "dispatch", "fused_out_one_row", *floor))
    # Every op case and its copies at both layouts: as allocated (natural) and at the process's page offset.
    for shape in ("1x4x64", "2x8x128"):
        for layout in ("natural", "page_offset"):
            copies = ("into_preallocated", "fresh_output")
            expected |= {("limit", shape, "float32", "copy", v, "cpu", layout) for v in copies}
            for baseline, variant in (("unfused", "call"), ("fused", "call"), ("fused", "out"), ("native", "call")):
                expected.add(("op", shape, "float32", baseline, variant, "cpu", layout))
    for baseline in ("unfused", "fused", "native"):
        expected.add(("model", "1x4x128", "float32", baseline, "call", "cpu", "page_offset"))
    assert _keys(frame) == expected
    assert re.fullmatch(r"\d{8}T\d{6}Z-.+\.csv", outcome.paths.csv.name)
    assert outcome.paths.csv.parent == tmp_path.resolve()


def test_rows_agree_with_their_raw_samples(torch_run):
    _, outcome = torch_run
    frame, samples = read_report(outcome.paths.csv), read_samples(outcome.paths.csv)
    floor = min(ROUND_FLOOR_CAP, -(-MIN_SAMPLES // ROUNDS))  # each round's share of the floor, capped
    for row in frame.itertuples():
        row_samples = samples[tuple(str(getattr(row, c)) for c in KEY_COLUMNS)]
        values = row_samples.values
        assert row.n == len(values) >= ROUNDS * floor
        assert (np.bincount(row_samples.rounds) >= floor).all()  # every round took its floor at least
        assert row.rounds == ROUNDS and sorted(set(row_samples.rounds)) == list(
            range(ROUNDS)
        )  # every round contributed
        assert row.median_us == pytest.approx(np.median(values)) and row.min_us == values.min()
        assert row.p99_us >= row.p90_us >= row.median_us >= row.min_us > 0


def test_ratios_bandwidth_and_environment(torch_run):
    _, outcome = torch_run
    frame = read_report(outcome.paths.csv)
    for _, rows in frame[frame.workload.isin(["op", "model"])].groupby(["workload", "shape", "layout"]):
        assert len(rows) == len(set(zip(rows.baseline, rows.variant, strict=True)))  # one layout's rows
        unfused = rows[(rows.baseline == "unfused")].median_us.iloc[0]
        np.testing.assert_allclose(rows.speedup_vs_unfused, unfused / rows.median_us)
    op = frame[frame.workload == "op"]
    for row in op.itertuples():
        b, s, h = (int(d) for d in row.shape.split("x"))
        assert row.bytes_moved == (2 * b * s * h + 2 * h) * 4  # read x, weight, bias; write y
        assert row.gbps == pytest.approx(row.bytes_moved / (row.median_us * 1e-6) / 1e9)
        # An allocating call is held against the fresh-output copy, the out variant against the preallocated one.
        limit = "fresh_output" if row.variant == "call" else "into_preallocated"
        copy = frame[
            (frame.baseline == "copy")
            & (frame["shape"] == row.shape)
            & (frame.variant == limit)
            & (frame.layout == row.layout)
        ]
        assert len(copy) == 1  # the copy at the row's own layout: a share pairs like with like
        copy = copy.iloc[0]
        assert row.copy_limit == limit
        assert row.copy_gbps == copy.gbps and row.copy_share == pytest.approx(row.gbps / copy.gbps)
    assert frame[frame.workload == "model"].gbps.isna().all()  # no single "bytes moved" for a model
    assert (frame.threads == 1).all() and (frame.device == "cpu").all() and (frame.timer == "perf_counter").all()
    # glibc as a user's process has it, said on every row and in the machine facts compare checks
    assert (frame.malloc_policy == "default").all() and frame.cpu_allocator.str.endswith(
        "(mmap threshold adapts)"
    ).all()
    floor = frame[(frame.baseline == "dispatch") & (frame.variant == "torch_noop")].median_us.iloc[0]
    np.testing.assert_allclose(frame.vs_launch_floor, frame.median_us / floor)
    assert (frame.torch == torch.__version__).all()
    assert frame.git_commit.str.fullmatch(r"[0-9a-f]{40}(-dirty)?|unknown").all()
    assert frame.timestamp_utc.nunique() == 1 and frame.schema_version.nunique() == 1
    # NaN where a row was timed for less than 0.1 s in all (10 ms clock ticks cannot tell), else a share.
    assert (frame.other_cpu_share.between(0, 1) | frame.other_cpu_share.isna()).all()


def test_thread_count_of_the_caller_is_restored(tmp_path):
    before = torch.get_num_threads()
    _run(
        tmp_path,
        baseline="fused",
        op_shapes=((1, 4, 64),),
        model_batches=(),
        threads=max(1, before - 1) if before > 1 else 2,
    )
    assert torch.get_num_threads() == before


def test_plot_and_summary(torch_run):
    _, outcome = torch_run
    plot = ReportPaths.for_csv(outcome.paths.csv).plot
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000
    console = Console(file=io.StringIO(), width=220, record=True)
    print_summary(outcome, console)
    text = console.export_text()
    assert "fused vs unfused" in text and str(outcome.paths.csv) in text and "no failures" in text


@pytest.mark.slow  # a cold torch.compile and six ONNX exports
def test_compiled_and_ort_routes_on_a_tiny_grid(tmp_path):
    outcome = _run(tmp_path, baseline="unfused,compiled,ort", op_shapes=((2, 4, 64),), model_batches=TINY_MODEL)
    assert outcome.failures == [], outcome.failures
    frame = outcome.frame
    ort_variants = {f"{r}-{m}" for r in ("standard", "opset23", "custom") for m in ("run", "iobinding")}
    assert {
        v for w, b, v in zip(frame.workload, frame.baseline, frame.variant, strict=True) if w == "op" and b == "ort"
    } == ort_variants
    assert {
        v for w, b, v in zip(frame.workload, frame.baseline, frame.variant, strict=True) if w == "model" and b == "ort"
    } == ort_variants
    compiled = frame[frame.baseline == "compiled"].iloc[0]
    assert compiled.setup_s > 0.05 and "compile" in compiled.note  # a cold compile, reported outside the timed loop
    notes = {
        v: n
        for b, v, n, w in zip(frame.baseline, frame.variant, frame.note, frame.workload, strict=True)
        if b == "ort" and w == "model"
    }
    # What ORT actually ran for the model's 5 norms after its graph optimisation:
    assert "SimplifiedLayerNormalization x5" in notes["standard-run"]
    assert "RMSNormalization x5" in notes["opset23-run"] and "fused_norm x5" in notes["custom-iobinding"]
    assert (frame[frame.baseline == "ort"].setup_s > 0).all()


def test_dtype_a_runtime_cannot_take_is_skipped_with_its_reason(tmp_path):
    outcome = _run(tmp_path, baseline="ort", dtype="bfloat16", op_shapes=((1, 4, 64),), model_batches=())
    assert outcome.failures == []
    assert len(outcome.skipped) == 2 and all("bfloat16" in line for line in outcome.skipped)  # one per layout
    assert "page_offset" in outcome.skipped[1] and "page_offset" not in outcome.skipped[0]
    assert set(outcome.frame.workload) == {"limit"}


def test_plan_jobs_limits_first_then_each_case_with_every_baseline(tmp_path):
    options = BenchOptions(
        baseline="native,unfused",
        dtype="float32,float16",
        op_shapes=TINY_SHAPES,
        model_batches=TINY_MODEL,
        device="cpu",
    )
    labels = [job.label for job in plan_jobs(options, tmp_path)]
    expected = ["limit dispatch floor"]
    for dtype in ("float32", "float16"):
        for shape in ("1x4x64", "2x8x128"):
            for case in (f"op {shape} {dtype}", f"op {shape} {dtype} page_offset"):  # the natural layout first
                expected += [f"{case} copy", f"{case} native", f"{case} unfused"]
        expected += [f"model tiny 1x4 {dtype} native", f"model tiny 1x4 {dtype} unfused"]
    assert labels == expected
    # One layout asked: its op jobs alone.
    natural = [job.label for job in plan_jobs(replace(options, layouts="natural"), tmp_path)]
    assert natural == [label for label in expected if "page_offset" not in label]
    with pytest.raises(ValueError, match="layouts must be all or one of"):
        plan_jobs(replace(options, layouts="shifted"), tmp_path)
    assert not list(tmp_path.iterdir())  # planning builds no case and writes nothing


def test_a_round_adds_timings_and_drops_a_row_that_fails_in_a_later_round(tmp_path):
    calls = {"n": 0}

    def flaky():
        calls["n"] += 1
        if calls["n"] > 1:
            raise RuntimeError("device lost")
        return torch.zeros(1, dtype=torch.float64)

    case = LimitCase(
        shape=(1,), dtype=torch.float64, x=torch.zeros(1, dtype=torch.float64), bytes_moved=8.0, workdir=tmp_path
    )
    job = Job("flaky", lambda: iter([(case, "test", Variant("v", lambda: flaky))]))
    settings = RunSettings(
        TimingConfig(warmup=0, budget_s=0.001, min_samples=2), rounds=2, resolution_ns=timer_resolution_ns()
    )
    results = Results()
    run_round([job], 0, settings, results)
    # prepare() returned the call; verify called it once, then the timing loop raised on the second call
    assert results.measured == {} and ("limit", "1", "float64", "test", "v", "cpu", "natural") in results.dropped
    assert results.failures == ["limit 1 float64 test/v: RuntimeError: device lost"]
    run_round([job], 1, settings, results)
    assert len(results.failures) == 1  # a dropped row is not retried


def test_what_a_job_leaves_alive_is_frozen_out_of_the_collections_that_start_each_measurement(tmp_path):
    # Each measurement starts with a full collection; walking the imported compiler stack took about 0.3 s a
    # time, so what outlives a job is frozen, and the next measurement's collection skips it.
    kept = []
    case = LimitCase(
        shape=(1,), dtype=torch.float64, x=torch.zeros(1, dtype=torch.float64), bytes_moved=8.0, workdir=tmp_path
    )

    def prepare():
        kept.append([[index] for index in range(1000)])  # a cache the job fills and keeps: outlives the job
        return lambda: torch.zeros(1, dtype=torch.float64)

    job = Job("cached", lambda: iter([(case, "test", Variant("v", prepare))]))
    settings = RunSettings(
        TimingConfig(warmup=0, budget_s=0.001, min_samples=2), rounds=1, resolution_ns=timer_resolution_ns()
    )
    gc.unfreeze()
    try:
        run_round([job], 0, settings, Results())
        assert gc.get_freeze_count() >= 1000
        collected = {id(o) for o in gc.get_objects()}  # what a collection walks: the frozen are not among them
        assert all(gc.is_tracked(item) and id(item) not in collected for item in kept[0])
    finally:
        gc.unfreeze()


def test_every_baseline_declares_its_order_and_devices():
    baselines = all_baselines()
    assert list(baselines) == sorted(baselines, key=lambda n: (baselines[n].order, n))
    assert list(baselines)[0] == "unfused"  # the speed-up reference leads the report
    for baseline in baselines.values():
        assert baseline.devices and baseline.devices <= {"cpu", "cuda"}, baseline.name
    with pytest.raises(TypeError, match="has no 'devices'"):
        register(type("NoDevices", (), {"name": "x", "workloads": frozenset({"op"}), "order": 1, "variants": None}))


def test_baseline_selection_and_errors():
    assert [b.name for b in select("all")] == ["unfused", "fused", "fused_add", "native", "compiled", "liger", "ort"]
    assert [b.name for b in select("ort, fused,ort")] == ["ort", "fused"]
    with pytest.raises(ValueError, match=r"unknown baseline\(s\) \['fast'\]: choose from"):
        select("fused,fast")
    with pytest.raises(ValueError, match="--dtype must be a comma list"):
        _run(None, dtype="float8")


def test_naming_baselines_imports_only_their_modules():
    # A fresh interpreter: this one has imported every baseline already.
    script = (
        "import sys\n"
        "from bench.plan.registry import select\n"
        "assert [b.name for b in select('fused')] == ['fused']\n"
        "assert 'bench.plan.baselines.ort' not in sys.modules and 'onnxscript' not in sys.modules, 'ort imported'\n"
        # native lives in eager.py: found by importing every module
        "assert [b.name for b in select('native,fused')] == ['native', 'fused']\n"
        "assert 'bench.plan.baselines.ort' in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, check=False)
    assert result.returncode == 0, result.stderr


def test_reports_dir_default_env_and_option(monkeypatch, tmp_path):
    monkeypatch.delenv("FUSEDBENCH_REPORTS_DIR", raising=False)
    assert reports_dir() == (REPO_ROOT / "reports").resolve()
    monkeypatch.setenv("FUSEDBENCH_REPORTS_DIR", str(tmp_path / "env"))
    assert reports_dir() == (tmp_path / "env").resolve()
    assert reports_dir(tmp_path / "opt") == (tmp_path / "opt").resolve()


def test_a_job_waits_for_its_first_turn_after_its_untimed_start_and_only_once(tmp_path, monkeypatch):
    # In an A/B worker the two builds set up at once (nothing is timed then): the first turn is awaited after
    # the first variant's setup and output check, before any warm-up; a later variant sets up in its turn.
    from bench.measure import turns as bench_turns

    events = []
    turns = bench_turns.Turns(lambda: events.append("turn"), turn_s=60.0)  # one long turn: no handoff
    monkeypatch.setattr(bench_turns, "_current", turns)
    x = torch.randn(64, dtype=torch.float64)
    case = LimitCase(shape=(64,), dtype=torch.float64, x=x, bytes_moved=x.nbytes, workdir=tmp_path)

    def variant(name):
        def call():
            events.append(f"{name} call")
            return x.clone()

        def prepare():
            events.append(f"{name} setup")
            return call

        return Variant(name, prepare)

    job = Job("two variants", lambda: iter([(case, "test", variant("a")), (case, "test", variant("b"))]))
    settings = RunSettings(TimingConfig(warmup=2, budget_s=0.001, min_samples=2), 1, timer_resolution_ns())
    results = Results()
    run_round([job], 0, settings, results)
    assert results.failures == [] and len(results.measured) == 2
    assert events[:4] == ["a setup", "a call", "turn", "a call"]  # setup, the output check, then the turn
    assert events.count("turn") == 1 and turns.begun
    later = events.index("b setup")
    assert events[later + 1] == "b call" and "turn" not in events[later:]
