"""bench/experiments/core_timing.cpp, the core's timing tool, builds with the kernel's flags and measures what it says.

Its numbers are quoted in docs/cpu-kernel.md; this keeps it building and
checks its three modes on tiny problems (their values are timings: only
their form and sign are checked, never their size).
"""

from __future__ import annotations

import platform
import re
import subprocess
from pathlib import Path

import pytest

from env.builder.config import OPT_FLAGS
from env.builder.toolchain import cpu_flags, cxx_compiler
from env.paths import REPO_ROOT, csrc_dir

pytestmark = pytest.mark.skipif(
    platform.machine() != "x86_64" or "avx512f" not in cpu_flags(),
    reason="the tool's add and copy baselines are AVX-512 code (an x86-64 CPU with AVX-512F runs them)",
)

NUMBER = r"(\d+\.\d+)"


@pytest.fixture(scope="module")
def tool(tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("core_timing") / "core_timing"
    sources = [
        str(csrc_dir() / "core" / "fused_norm_cpu.cpp"),
        str(csrc_dir() / "platform" / "cpu_caches.cpp"),
        str(REPO_ROOT / "bench" / "experiments" / "core_timing.cpp"),
    ]
    subprocess.run(
        [cxx_compiler(), "-std=c++17", *OPT_FLAGS, "-Wno-psabi", f"-I{csrc_dir()}", *sources, "-o", str(exe)],
        check=True,
    )
    return exe


def _run(tool: Path, *args: str) -> str:
    return subprocess.run([str(tool), *args], capture_output=True, text=True, check=True).stdout


def test_norm_mode_times_the_op_and_memcpy_at_every_layout(tool):
    lines = re.findall(rf"d=\s*(\d+)\s+op {NUMBER}\s+copy {NUMBER}", _run(tool, "norm", "16", "64", "3"))
    assert [int(d) for d, _, _ in lines] == [0, 64, 128, 512, 1024, 2048, 3072, 4032]
    assert all(float(op) > 0 and float(copy) > 0 for _, op, copy in lines)


def test_add_mode_times_both_forms(tool):
    m = re.search(rf"fused {NUMBER} us, two calls {NUMBER} us", _run(tool, "add", "16", "64", "3", "64"))
    assert m and float(m.group(1)) > 0 and float(m.group(2)) > 0


def test_copy_mode_times_three_copies(tool):
    m = re.search(rf"memcpy {NUMBER}, vector stores {NUMBER}, streaming {NUMBER}", _run(tool, "copy", "64", "64", "3"))
    assert m and all(float(v) > 0 for v in m.groups())


@pytest.mark.parametrize("args", [("copy", "3", "5"), ("norm", "0", "64"), ("trace", "4", "4")])
def test_bad_arguments_exit_2_with_usage(tool, args):
    run = subprocess.run([str(tool), *args], capture_output=True, text=True)
    assert run.returncode == 2 and run.stderr.strip()
