"""Every instruction-set version of the CPU kernel computes the same bits.

The core is built from csrc/core/fused_norm_cpu.cpp with the project's
optimisation flags, as delivered (the loader picks the widest version this
CPU runs) and as single-version builds: x86-64 (SSE2, xmm) and, where this
CPU runs them, x86-64-v3 (AVX2, ymm), x86-64-v4 (AVX-512, zmm) and x86-64-v4
with AVX512-BF16 (bfloat16 stored by the hardware conversion). Each runs the
same random problems (every dtype, row lengths around every vector width,
rows split between two calls as threads split them, values in every
conversion's corner cases); all outputs must be identical to the byte. Each
build runs twice: as the problems come (small: ordinary stores) and with
FUSED_NORM_LLC_BYTES=1, where every problem whose rows are whole cache lines
writes its output with streaming (non-temporal) stores, and every problem's
scaled write prefetches the next block's rows (both rules take a problem past
the last-level cache).
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from env.builder.config import OPT_FLAGS
from env.builder.toolchain import cpu_flags, cxx_compiler
from env.paths import REPO_ROOT, csrc_dir
from tests.helpers.cpu_levels import runnable_levels

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(platform.machine() != "x86_64", reason="the versions are x86-64 instruction sets"),
]

PROBE = REPO_ROOT / "tests" / "helpers" / "cpu_versions_probe.cpp"


def build(directory: Path, name: str, extra: list[str]) -> Path:
    exe = directory / name
    sources = [
        str(PROBE),
        str(csrc_dir() / "core" / "fused_norm_cpu.cpp"),
        str(csrc_dir() / "platform" / "cpu_caches.cpp"),
    ]
    subprocess.run(
        [cxx_compiler(), "-std=c++17", *OPT_FLAGS, "-Wno-psabi", f"-I{csrc_dir()}", *extra, *sources, "-o", str(exe)],
        check=True,
    )
    return exe


def test_every_version_gives_identical_bits(tmp_path, generator):
    # One compile per build, side by side: the delivered build (every version) takes as long as the rest together.
    wanted = {"delivered (loader's choice)": ("delivered", [])}
    wanted.update({level: (level, [*flags, "-DFUSED_NORM_NO_CLONES"]) for level, flags in runnable_levels().items()})
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(build, tmp_path, file, extra) for name, (file, extra) in wanted.items()}
        builds = {name: future.result() for name, future in futures.items()}
    seed = str(int(generator.initial_seed()))
    # Problems whose rows are whole 64-byte lines, per dtype: the random ones at hidden 16, 32, 64, 768
    # (float32), 8 to 768 (float64), 32 to 768 (16-bit), plus the special values' norm and add at 768
    # and the NaN sources' five norms and one add at 768.
    whole_line_problems = (4 + 2 + 6) + (5 + 2 + 6) + (3 + 2 + 6) + (3 + 2 + 6)
    outputs = {}
    for name, exe in builds.items():
        for mode, llc in (("", None), (" streamed", "1")):
            env = {k: v for k, v in os.environ.items() if k != "FUSED_NORM_LLC_BYTES"}
            if llc:
                env["FUSED_NORM_LLC_BYTES"] = llc
            run = subprocess.run([str(exe), seed], capture_output=True, check=True, env=env)
            streamed = int(re.search(rb"streamed problems: (\d+)", run.stderr).group(1))
            assert streamed == (whole_line_problems if llc else 0), (name + mode, streamed)
            outputs[name + mode] = run.stdout
    reference = outputs["x86-64"]
    assert len(reference) > 100_000 and reference != b"\xff" * len(reference)
    differ = [name for name, out in outputs.items() if out != reference]
    assert not differ, f"outputs differ from the x86-64 build: {differ} (built: {sorted(builds)})"
    assert len(builds) >= 3 or "avx2" not in cpu_flags(), sorted(builds)
