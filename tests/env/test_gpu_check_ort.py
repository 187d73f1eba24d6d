"""Which ONNX Runtime checks on CUDA a GPU check runs (bench/gpu_check_ort.py), decided on this CPU machine by
standing in for each fact it asks about: a CUDA device, ORT's providers, whether a CUDA session really starts,
and whether the ORT library was built with its CUDA kernel."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench import gpu_check
from bench.gpu_check_ort import ORT_CUDA_SELECTION, ORT_CUDA_TEST_FILES, SERVE_CUDA_MISSING, ort_cuda_items
from env.paths import REPO_ROOT


@pytest.fixture
def machine(monkeypatch):
    """A machine where everything ORT on CUDA needs is present; each test takes one fact away."""
    facts = SimpleNamespace(
        providers=["CUDAExecutionProvider", "CPUExecutionProvider"],
        session=(True, "onnxruntime 1.31.1 creates CUDAExecutionProvider sessions"),
        record={"build": {"ort_cuda_kernels": True}},
    )
    import onnxruntime

    from env.builder import ort_runtime, toolchain

    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: facts.providers)
    monkeypatch.setattr(ort_runtime, "cuda_provider_status", lambda: facts.session)
    monkeypatch.setattr(toolchain, "read_record", lambda: facts.record)
    return facts


def test_everything_runs_where_ort_runs_on_cuda(machine):
    items = ort_cuda_items(cuda=True)
    assert items == {"ort_cuda_tests": None, "bench_ort_cuda": None, "serve_cuda": SERVE_CUDA_MISSING}


def test_no_device_skips_every_item(machine):
    assert set(ort_cuda_items(cuda=False).values()) == {"no CUDA device"}


def test_the_cpu_only_build_says_to_carry_the_gpu_build(machine):
    import onnxruntime

    machine.providers = ["CPUExecutionProvider"]
    reason = ort_cuda_items(cuda=True)["ort_cuda_tests"]
    assert f"onnxruntime {onnxruntime.__version__} here is a CPU-only build (providers: CPUExecutionProvider)" in reason
    assert "scripts/gpu_check_offline.sh bundle" in reason


def test_a_provider_that_cannot_start_a_session_gives_ort_s_reason(machine):
    machine.session = (False, "a CUDA session could not be created: libcublasLt.so.13: cannot open shared object")
    items = ort_cuda_items(cuda=True)
    assert items["ort_cuda_tests"] == items["bench_ort_cuda"] == machine.session[1]
    assert items["serve_cuda"] == machine.session[1]


def test_a_library_without_its_cuda_kernel_says_why(machine):
    machine.record = {"build": {"ort_cuda_kernels": False, "ort_cuda_kernels_reason": "nvcc not found"}}
    assert (
        ort_cuda_items(cuda=True)["ort_cuda_tests"]
        == "the ORT library was built without its CUDA kernel: nvcc not found"
    )
    machine.record = {}
    assert ort_cuda_items(cuda=True)["ort_cuda_tests"] == "no toolchain record: the build did not finish"


def test_the_step_runs_the_selection_or_says_why_not(machine, monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(
        gpu_check, "run_pytest", lambda args, name, pytest_args: calls.append((name, pytest_args)) or {"status": "ok"}
    )
    args = gpu_check.GpuCheckOptions(out=tmp_path)
    step, items = gpu_check.step_ort_cuda(args, cuda=True)
    assert step == {"status": "ok"} and items["ort_cuda_tests"] == "runs"
    assert calls == [("ort_cuda_tests", ["-m", "gpu", "-k", ORT_CUDA_SELECTION, *ORT_CUDA_TEST_FILES])]
    machine.providers = ["CPUExecutionProvider"]
    step, items = gpu_check.step_ort_cuda(args, cuda=True)
    assert step["status"].startswith("skipped (onnxruntime ") and "CPU-only build" in step["status"]
    assert items["serve_cuda"] == items["ort_cuda_tests"] and len(calls) == 1  # nothing more ran


def test_the_selection_is_exactly_the_ort_cuda_tests_and_the_gpu_tests_leave_them_out():
    # Collected on this machine (the gpu-marked tests are collected, then skip): the selection takes the ORT
    # CUDA tests of each file and nothing else, and the GPU tests' deselection is its complement.
    def collect(*args: str) -> set[str]:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "gpu", *args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return {line for line in done.stdout.splitlines() if "::" in line}

    selected = collect("-k", ORT_CUDA_SELECTION, *ORT_CUDA_TEST_FILES)
    functions = {line.split("::")[1].split("[")[0] for line in selected}
    assert functions == {"test_ort_cuda_route_equals_torch", "test_route_runs_fused_on_the_device_and_matches_float64"}
    assert {Path(line.split("::")[0]).name for line in selected} == {Path(f).name for f in ORT_CUDA_TEST_FILES}
    rest = collect("-k", f"not ({ORT_CUDA_SELECTION})", *ORT_CUDA_TEST_FILES)
    assert rest and not rest & selected and rest | selected == collect(*ORT_CUDA_TEST_FILES)
