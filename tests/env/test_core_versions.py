"""Which kernel versions a build compiles: all three for delivery, the loader's one for a benchmark."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from bench.ab import scratch
from env.builder import config, cpu_level, steps
from env.builder.toolchain import cpu_flags
from env.paths import REPO_ROOT

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="the kernel core has versions on x86-64 only")

# The x86-64 psABI's levels as /proc/cpuinfo names their features (pni: SSE3, abm: LZCNT): an independent statement
# of what libgcc's check accepts.
PSABI = {
    2: {"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"},
    3: {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"},
    4: {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"},
}


def _psabi_level(flags: set[str]) -> int:
    level = 1
    for candidate in (2, 3, 4):
        if not all(PSABI[n] <= flags for n in range(2, candidate + 1)):
            break
        level = candidate
    return 1 if level == 2 else level  # the core has no x86-64-v2 version: such a CPU runs the baseline


def test_the_loaders_level_is_the_widest_psabi_level_this_cpu_has():
    assert cpu_level.loader_level() == _psabi_level(cpu_flags())


@pytest.mark.parametrize(
    ("flags", "level"),
    [
        (set(), 1),
        (PSABI[2], 1),
        (PSABI[2] | PSABI[3], 3),
        (PSABI[2] | PSABI[3] - {"movbe"}, 1),
        (set().union(*PSABI.values()), 4),
    ],
)
def test_the_psabi_reference_itself(flags, level):
    assert _psabi_level(flags) == level


def test_a_build_compiles_every_version_unless_a_benchmark_asks(monkeypatch):
    monkeypatch.delenv(config.CORE_VERSIONS_VARIABLE, raising=False)
    assert config.core_versions() == "all" and not any("FUSED_NORM_CPU_LEVEL" in f for f in config.cxx_opt_flags())
    assert config.core_versions_label().startswith("all three")
    with config.core_versions_for(config.benchmark_core_versions()):
        level = cpu_level.loader_level()
        assert config.core_versions() == "loader"
        assert config.cxx_opt_flags()[-1] == f"-DFUSED_NORM_CPU_LEVEL={level}"
        assert f"-DFUSED_NORM_CPU_LEVEL={level}" in config.torch_cxx_flags()
        assert (
            config.core_versions_label()
            == f"{cpu_level.LEVEL_NAMES[level]} alone (the version the loader runs on this CPU)"
        )
    assert config.core_versions() == "all"  # restored on leaving


def test_the_variable_decides_for_every_build_and_is_checked(monkeypatch):
    monkeypatch.setenv(config.CORE_VERSIONS_VARIABLE, "all")
    with config.core_versions_for("loader"):
        assert config.core_versions() == "all"
    assert config.benchmark_core_versions() == "all"
    monkeypatch.setenv(config.CORE_VERSIONS_VARIABLE, "native")
    with pytest.raises(ValueError, match="FUSEDBENCH_CORE_VERSIONS must be one of all, loader, got 'native'"):
        config.core_versions()


@pytest.mark.parametrize(
    ("for_benchmarks", "mode", "expected"), [(True, "jit", "loader"), (False, "jit", "all"), (True, "aot", "all")]
)
def test_the_build_runs_its_steps_with_the_versions_of_its_kind(monkeypatch, for_benchmarks, mode, expected):
    monkeypatch.delenv(config.CORE_VERSIONS_VARIABLE, raising=False)
    seen = []

    def fake_build(*_args):
        seen.append(config.core_versions())

    monkeypatch.setattr(steps, "_build", fake_build)
    steps.build(mode, for_benchmarks=for_benchmarks)
    assert seen == [expected] and config.core_versions() == "all"


def test_a_comparisons_base_is_built_with_the_benchmark_builds_versions(monkeypatch, tmp_path):
    monkeypatch.delenv(config.CORE_VERSIONS_VARIABLE, raising=False)
    captured = {}

    def fake_run(command, **kwargs):
        captured.update(kwargs["env"])
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(scratch.subprocess, "run", fake_run)
    scratch.build(tmp_path, tmp_path / "build", tmp_path / "log" / "build.log")
    assert captured[config.CORE_VERSIONS_VARIABLE] == "loader"


def test_a_delivered_build_refuses_to_hold_one_version():
    result = subprocess.run(
        [sys.executable, "setup.py", "--name"],
        cwd=REPO_ROOT,
        env={**os.environ, config.CORE_VERSIONS_VARIABLE: "loader"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert "a delivered build carries every kernel version; unset FUSEDBENCH_CORE_VERSIONS" in result.stderr
