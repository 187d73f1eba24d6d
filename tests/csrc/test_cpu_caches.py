"""The cache sizes the CPU kernel plans with come from csrc/platform, never from the core.

csrc/platform/cpu_caches.cpp reads one instance of each data cache from a
sysfs tree (/sys/devices/system/cpu/cpu0/cache/index*/ on Linux) and lets
FUSED_NORM_L2_BYTES / FUSED_NORM_LLC_BYTES override it; the adapters pass the
result in each problem. Here it reads hand-made trees whose sizes are known.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from env.builder.config import OPT_FLAGS
from env.builder.toolchain import cxx_compiler
from env.paths import REPO_ROOT, csrc_dir

PROBE = REPO_ROOT / "tests" / "helpers" / "cpu_caches_probe.cpp"

# A Zen-like cpu0: L1d and L1i of 32 KiB, L2 of 1 MiB, L3 of 32 MiB (sysfs writes "K" sizes;
# "M" appears on some kernels).
ZEN = [(1, "Data", "32K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"), (3, "Unified", "32M")]


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("cpu_caches") / "cpu_caches_probe"
    sources = [str(PROBE), str(csrc_dir() / "platform" / "cpu_caches.cpp")]
    subprocess.run([cxx_compiler(), "-std=c++17", *OPT_FLAGS, f"-I{csrc_dir()}", *sources, "-o", str(exe)], check=True)
    return exe


def tree(root: Path, caches: list[tuple[int, str, str]]) -> Path:
    for index, (level, kind, size) in enumerate(caches):
        d = root / f"index{index}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    return root


def read(probe: Path, cache_dir: Path, l2: str = "-", llc: str = "-") -> tuple[int, int]:
    out = subprocess.run([str(probe), str(cache_dir), l2, llc], capture_output=True, text=True, check=True).stdout
    m = re.fullmatch(r"level2 (\d+) last_level (\d+)\n", out)
    assert m, out
    return int(m.group(1)), int(m.group(2))


def test_reads_one_instance_of_l2_and_of_the_last_level(probe, tmp_path):
    assert read(probe, tree(tmp_path, ZEN)) == (1 << 20, 32 << 20)


def test_an_instruction_cache_is_never_the_answer(probe, tmp_path):
    # Only L1 caches, the instruction one listed last: the last level is the data L1.
    caches = [(1, "Data", "48K"), (1, "Instruction", "64K")]
    assert read(probe, tree(tmp_path, caches)) == (0, 48 << 10)


def test_nothing_readable_means_nothing_known(probe, tmp_path):
    assert read(probe, tmp_path / "absent") == (0, 0)


def test_overrides_replace_what_the_tree_says(probe, tmp_path):
    zen = tree(tmp_path, ZEN)
    assert read(probe, zen, l2="262144") == (262144, 32 << 20)
    assert read(probe, zen, llc="1") == (1 << 20, 1)
    # Set but not a positive number: not known, so the kernel neither streams nor splits by L2.
    assert read(probe, zen, l2="0", llc="lots") == (0, 0)


def test_the_core_does_not_ask_the_machine():
    # The core is math only: the sizes arrive in NormProblem::caches.
    asks = re.compile(r"getenv|/sys/|fopen|sysconf")
    found = [
        f"{path.relative_to(REPO_ROOT)}:{n}"
        for path in sorted((csrc_dir() / "core").iterdir())
        if path.suffix in {".h", ".cpp", ".cu"}
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if asks.search(line)
    ]
    assert not found, found
