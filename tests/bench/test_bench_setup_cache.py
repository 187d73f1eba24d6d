"""Set-up paid once: torch.compile's graphs cached under the build folder, kept between processes and runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.plan.inductor_cache import INDUCTOR_CACHE
from bench.plan.registry import Prepared, select
from bench.plan.workloads import OpCase
from ops.model import build_model
from ops.reference import COMPOSITION_TOLERANCES, REFERENCE, reference_add_norm, reference_norm


@pytest.mark.slow  # two compiles by Inductor
def test_a_second_compile_of_one_case_is_served_from_the_cache_under_the_build_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEDBENCH_BUILD_DIR", str(tmp_path / "build"))
    (compiled,) = select("compiled")
    case = OpCase.create((2, 4, 64), torch.float32, tmp_path / "run", seed=int(torch.randint(0, 1000, ())))
    notes = []
    for _ in range(2):  # as the second process of a run, or the next run, would
        (variant,) = compiled.variants(case)
        prepared = variant.prepare()
        assert isinstance(prepared, Prepared)
        expected = reference_norm(case.x.double(), case.weight.double(), case.bias.double(), case.eps)
        torch.testing.assert_close(prepared.call().double(), expected, **REFERENCE.fp32.as_kwargs())
        notes.append(prepared.note)
    assert notes[0].endswith("cold compile time") and "FX graph cache" in notes[1], notes
    assert any((tmp_path / "build" / INDUCTOR_CACHE).iterdir())  # under the build folder, not the run's workdir


@pytest.mark.slow  # one compile by Inductor in a fresh process, one load
def test_graphs_compiled_ahead_without_the_library_serve_the_benchmarks_compile(tmp_path, monkeypatch):
    import subprocess
    import sys

    from bench.plan.inductor_cache import cache_folder
    from env.paths import REPO_ROOT

    build = tmp_path / "build"
    monkeypatch.setenv("FUSEDBENCH_BUILD_DIR", str(build))
    shape = (2, 4, 72)
    # No library in this build folder: the warm-up must compile without loading it.
    command = [sys.executable, "-m", "bench.plan.warm_compiles", "--threads", str(torch.get_num_threads())]
    done = subprocess.run([*command, "add_norm:2x4x72"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("add_norm 2x4x72: ") and done.stdout.strip().endswith("(compiled)"), done.stdout
    assert any(cache_folder("add_norm", "cpu", shape, torch.float32).iterdir())
    (compiled,) = select("compiled")
    from bench.plan.workloads import AddNormCase

    case = AddNormCase.create(shape, torch.float32, tmp_path / "run", seed=int(torch.randint(0, 1000, ())))
    (variant,) = compiled.variants(case)
    prepared = variant.prepare()
    assert "FX graph cache" in prepared.note, prepared.note  # the benchmark's own compile found the graph
    y, s = prepared.call()
    y_ref, s_ref = reference_add_norm(case.x, case.residual, case.weight, case.bias, case.eps)
    assert torch.equal(s.double(), s_ref)  # the sum is rounded once, as the reference's stored sum
    torch.testing.assert_close(y.double(), y_ref, **COMPOSITION_TOLERANCES[torch.float32].as_kwargs())
    bad = subprocess.run([*command, "model:2x4x72"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "WORKLOAD:SHAPE with WORKLOAD one of" in bad.stderr


def test_a_run_warms_the_graphs_it_will_compile_and_nothing_else(monkeypatch, tmp_path):
    from bench.plan import warm_compiles
    from bench.plan.options import BenchOptions

    monkeypatch.setenv("FUSEDBENCH_BUILD_DIR", str(tmp_path))
    started = []

    class Recorder:
        def __init__(self, command, **kwargs):
            started.append(command)

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr(warm_compiles.subprocess, "Popen", Recorder)
    assert warm_compiles.start(BenchOptions(quick=True, threads=1)) is not None
    graphs = started[-1][started[-1].index("--threads") :]
    assert graphs == ["--threads", "1", "op:1x8x512", "op:8x128x1024"]  # a quick run has no add_norm rows
    warm_compiles.start(BenchOptions(threads=2))
    assert started[-1][-10:] == [
        *(f"op:{s}" for s in ("1x8x512", "4x64x768", "8x128x1024", "16x256x2048", "32x512x4096")),
        *(f"add_norm:{s}" for s in ("1x8x512", "4x64x768", "8x128x1024", "16x256x2048", "32x512x4096")),
    ]
    for options in (
        BenchOptions(baseline="fused"),
        BenchOptions(device="cuda"),
        BenchOptions(dtype="bfloat16"),
    ):
        assert warm_compiles.start(options) is None
    assert len(started) == 2
    (tmp_path / warm_compiles.LOG).write_text(
        "op 1x8x512: 9.0 s (compiled)\na warning torch printed\nop 8x128x1024: 0.1 s (already cached)\n"
    )
    assert warm_compiles.finish(Recorder([])).startswith("Inductor's caches: 1 of 2 graphs compiled")
    assert warm_compiles.start(BenchOptions(op_shapes=((2, 4, 64),), threads=1)) is not None
    assert started[-1][-1] == "op:2x4x64"  # only the op's shapes overridden: no add_norm rows, as the plan has it
    assert warm_compiles.finish(None) is None

    # Graphs an earlier run compiled are the first process's to load: only the others are warmed, and with none
    # left nothing starts (a run whose libraries were up to date waited for ten loads).
    from bench.plan.inductor_cache import cache_folder, folder_named

    assert folder_named("op", "cpu", (1, 8, 512), "float32") == cache_folder("op", "cpu", (1, 8, 512), torch.float32)
    cached = folder_named("op", "cpu", (1, 8, 512), "float32") / "fxgraph" / "ab"
    cached.mkdir(parents=True)
    (folder_named("op", "cpu", (8, 128, 1024), "float32") / "fxgraph").mkdir(parents=True)  # empty: not cached
    assert warm_compiles.start(BenchOptions(quick=True, threads=1)) is not None
    assert started[-1][started[-1].index("--threads") + 2 :] == ["op:8x128x1024"]
    (folder_named("op", "cpu", (8, 128, 1024), "float32") / "fxgraph" / "cd").mkdir()
    count = len(started)
    assert warm_compiles.start(BenchOptions(quick=True, threads=1)) is None and len(started) == count


def test_the_exports_made_ahead_of_a_run_are_the_modules_its_ort_variants_would_export():
    from bench.plan.options import BenchOptions
    from bench.plan.warm_exports import export_cases

    full = [(c.workload, c.shape[-1], c.dtype) for c in export_cases(BenchOptions(), Path("w"))]
    hidden = [512, 768, 1024, 2048, 4096]  # the CPU grid's op shapes, and the add + norm's (the same)
    d_model = build_model("unfused").config.d_model
    assert full == [
        *(("op", h, torch.float32) for h in hidden),
        *(("add_norm", h, torch.float32) for h in hidden),
        ("model", d_model, torch.float32),  # one export serves every batch of the model
    ]
    assert all(c.x.shape[:-1].numel() <= 32 for c in export_cases(BenchOptions(), Path("w")))  # no full-size input
    quick = export_cases(BenchOptions(quick=True, dtype="float32,float16,bfloat16"), Path("w"))
    # No add + norm rows in a quick run; bfloat16 has no numpy type, ORT's Python feed type: the baseline skips it.
    assert sorted({(c.workload, c.dtype) for c in quick}, key=str) == sorted(
        {(w, d) for w in ("op", "model") for d in (torch.float32, torch.float16)}, key=str
    )
    for options in (
        BenchOptions(baseline="fused,compiled"),  # no ORT variant
        BenchOptions(device="cuda"),  # the CPU's grid only
        BenchOptions(jobs=("op 1x8x512 float32 ort",)),  # a selection exports in its processes
        BenchOptions(rows=("op 1x8x512 float32 ort/custom-run",)),
        BenchOptions(dtype="bfloat16"),
    ):
        assert export_cases(options, Path("w")) == [], options


@pytest.mark.slow  # six ONNX exports and six ORT sessions
def test_a_run_whose_exports_were_made_ahead_loads_them_and_reports_their_time(tmp_path):
    from bench.measure.verify import verify_outputs
    from bench.plan.options import BenchOptions
    from bench.plan.warm_exports import export_ahead
    from bench.plan.workloads import AddNormCase

    workdir = tmp_path / "run"
    options = BenchOptions(baseline="ort", op_shapes=((2, 4, 64),), add_norm_shapes=((2, 4, 96),), model_batches=())
    line = export_ahead(options, workdir)
    assert line is not None and line.startswith("ONNX exports: 2 of 2 modules exported by every route"), line

    def exports() -> dict:
        return {p: p.stat().st_mtime_ns for p in workdir.glob("*.onnx") if ".optimized-" not in p.name}

    files = exports()
    assert len(files) == 6
    seconds = {p.name: float(p.with_name(p.name + ".seconds").read_text()) for p in files}
    assert all(0 < s < 60 for s in seconds.values()), seconds
    # Cases of the run's own shapes (other rows, other seeds of x): the weights come from the hidden size alone.
    seed = int(torch.randint(1, 1000, ()))
    cases = [
        OpCase.create((3, 5, 64), torch.float32, workdir),
        AddNormCase.create((2, 7, 96), torch.float32, workdir),
    ]
    torch.manual_seed(seed)
    (ort,) = select("ort")
    for case in cases:
        for variant in ort.variants(case):
            prepared = variant.prepare()
            # The case's float64 reference holds its own weights: an export with others would fail here.
            verify_outputs(prepared.call(), case.reference(), case.tolerance)
            route = variant.name.rsplit("-", 1)[0]
            name = f"ort-{case.workload}-{case.shape[-1]}-float32-{route}.onnx"
            assert prepared.reused_setup_s == pytest.approx(seconds[name], abs=1e-6), variant.name
    assert exports() == files  # loaded, none exported again


def test_a_module_that_fails_to_export_ahead_is_left_to_the_run(monkeypatch, tmp_path):
    from bench.plan import warm_exports
    from bench.plan.baselines import ort
    from bench.plan.options import BenchOptions

    def export(case):
        if case.workload == "add_norm":
            raise RuntimeError("no exporter today")
        return 0.5

    monkeypatch.setattr(ort, "export_ahead", export)
    options = BenchOptions(baseline="ort", op_shapes=((2, 4, 64),), add_norm_shapes=((2, 4, 96),), model_batches=())
    line = warm_exports.export_ahead(options, tmp_path)
    assert line.startswith("ONNX exports: 1 of 2 modules") and line.endswith(
        "left to the run: add_norm 96: RuntimeError"
    )
    assert warm_exports.export_ahead(BenchOptions(baseline="fused"), tmp_path) is None
