"""The build keeps the kernel core's compile on a CPU of its own: ninja runs one compile a CPU, and the ORT
adapters compile at a lower priority while the core compiles beside them."""

from __future__ import annotations

import os
import sys

import pytest

from env.builder import ort_library
from env.builder.ort_library import BESIDE_CORE_NICENESS, Step, _compile_all
from env.builder.torch_library import _one_compile_a_cpu


def test_ninja_runs_one_compile_a_usable_cpu(monkeypatch) -> None:
    monkeypatch.delenv("MAX_JOBS", raising=False)
    monkeypatch.setenv("FUSEDBENCH_PROBE", "kept")
    env = _one_compile_a_cpu(None)
    assert env["MAX_JOBS"] == str(len(os.sched_getaffinity(0)))
    assert env["FUSEDBENCH_PROBE"] == "kept"  # this process's environment, with MAX_JOBS added
    assert "MAX_JOBS" not in os.environ  # a copy: the caller's environment is left as it was


def test_a_callers_max_jobs_wins(monkeypatch) -> None:
    monkeypatch.setenv("MAX_JOBS", "7")
    assert _one_compile_a_cpu(None)["MAX_JOBS"] == "7"
    assert _one_compile_a_cpu({"MAX_JOBS": "3", "PATH": "/bin"}) == {"MAX_JOBS": "3", "PATH": "/bin"}


@pytest.mark.parametrize("niceness", [0, BESIDE_CORE_NICENESS])
def test_adapter_compiles_run_at_the_niceness_asked(tmp_path, monkeypatch, niceness) -> None:
    monkeypatch.setattr(ort_library, "compiler_cache_env", lambda: None)
    probe = [sys.executable, "-c", "import os; print('niceness', os.nice(0))"]
    steps = [Step(f"probe {i}", probe, tmp_path / f"probe{i}.log") for i in range(3)]
    _compile_all(steps, niceness)
    base = os.nice(0)  # the test's own niceness: the compiles' is relative to it
    for step in steps:
        assert f"niceness {base + niceness}" in step.log.read_text()
