"""The CPU kernel's single-version builds: each instruction-set level's compiler flags and what it needs to run.

The delivered core carries one version per level and the loader runs the
widest this CPU has; a build with ``-DFUSED_NORM_NO_CLONES`` and a level's
flags holds that version alone.
"""

from __future__ import annotations

import platform

from env.builder.toolchain import cpu_flags

# Single-version build -> (its compiler flags, the /proc/cpuinfo flags it needs to run), narrowest first.
LEVELS = {
    "x86-64": (["-march=x86-64"], set()),
    "x86-64-v3": (["-march=x86-64-v3"], {"avx2", "fma", "f16c", "bmi2"}),
    "x86-64-v4": (["-march=x86-64-v4"], {"avx512f", "avx512bw", "avx512vl"}),
    # bfloat16 stored with vcvtne2ps2bf16 (its subnormal groups in software).
    "x86-64-v4+avx512bf16": (["-march=x86-64-v4", "-mavx512bf16"], {"avx512f", "avx512bw", "avx512vl", "avx512_bf16"}),
}


def runnable_levels(flags: set[str] | None = None) -> dict[str, list[str]]:
    """The levels this CPU (or one with ``flags``) runs -> their compiler flags, narrowest first."""
    have = cpu_flags() if flags is None else flags
    return {level: march for level, (march, needs) in LEVELS.items() if needs <= have}


def loaders_choice(flags: set[str] | None = None, machine: str | None = None) -> tuple[str, list[str]]:
    """The level whose version the delivered core runs on this CPU, and the flags that build it alone.

    Off x86-64 the core is built without versions (csrc/core/fused_norm_cpu.cpp), so no flag is needed."""
    if (machine or platform.machine()) != "x86_64":
        return "no versions", []
    level, march = list(runnable_levels(flags).items())[-1]
    return level, [*march, "-DFUSED_NORM_NO_CLONES"]
