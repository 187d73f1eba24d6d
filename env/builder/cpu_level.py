"""The instruction-set level whose kernel version the loader runs on this CPU, asked of the compiler's own runtime.

The delivered kernel core carries one version per level (x86-64-v4, x86-64-v3
and the x86-64 baseline: csrc/core/fused_norm_cpu.cpp) and GCC's loader runs
the widest one libgcc's CPU check accepts. A benchmark build holds that version
alone (``-DFUSED_NORM_CPU_LEVEL``): the same check, compiled by the build's
compiler and run here, names it, so the choice is the loader's by construction
rather than a copy of its feature lists.
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import tempfile
from pathlib import Path

# FUSED_NORM_CPU_LEVEL's values -> the level's name.
LEVEL_NAMES = {4: "x86-64-v4", 3: "x86-64-v3", 1: "x86-64"}

_PROBE = r"""
#include <cstdio>
int main() {
  __builtin_cpu_init();
  std::printf("%d\n", __builtin_cpu_supports("x86-64-v4") ? 4 : __builtin_cpu_supports("x86-64-v3") ? 3 : 1);
  return 0;
}
"""


class LevelProbeError(RuntimeError):
    """The compiler could not build or run the CPU check (the message has its output)."""


@functools.cache
def loader_level(compiler: str | None = None) -> int | None:
    """4, 3 or 1: the level of the version the loader runs here; None off x86-64, where the core has no versions.

    ``compiler``: the C++ compiler the build uses (default $CXX, else c++).
    """
    if platform.machine() != "x86_64":
        return None
    compiler = compiler or os.environ.get("CXX") or "c++"
    with tempfile.TemporaryDirectory(prefix="fusedbench-level-") as folder:
        source, program = Path(folder) / "probe.cpp", Path(folder) / "probe"
        source.write_text(_PROBE)
        built = subprocess.run([compiler, "-O1", str(source), "-o", str(program)], capture_output=True, text=True)
        if built.returncode != 0:
            raise LevelProbeError(f"{compiler} could not build the CPU level check:\n{built.stderr.strip()}")
        ran = subprocess.run([str(program)], capture_output=True, text=True)
    if ran.returncode != 0 or ran.stdout.strip() not in ("4", "3", "1"):
        raise LevelProbeError(f"the CPU level check printed {ran.stdout.strip()!r} (exit {ran.returncode})")
    return int(ran.stdout)
