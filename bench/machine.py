"""How much of the CPU other processes used while something was timed.

On a small machine shared with other work, a 2-thread op waits for a core
whenever anything else runs: its time then measures the neighbours. Each
report row records the share of all cores that OTHER processes used during its
timed loop (/proc/stat busy time minus this process's CPU time), so a reader -
and `invoke compare` - can tell a slow kernel from a busy machine.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

_PROC_STAT = Path("/proc/stat")
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class CpuSnapshot:
    busy_s: float  # all cores, all processes; NaN where /proc/stat is unavailable
    own_s: float  # this process, all threads
    wall_s: float


def _busy_seconds() -> float:
    try:
        fields = _PROC_STAT.read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return math.nan
    ticks = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / _TICKS


def snapshot() -> CpuSnapshot:
    times = os.times()
    return CpuSnapshot(busy_s=_busy_seconds(), own_s=times.user + times.system, wall_s=times.elapsed)


def other_cpu_share(before: CpuSnapshot, after: CpuSnapshot, cores: int | None = None) -> float:
    """Fraction (0..1) of all cores' time that other processes used between two snapshots."""
    cores = cores or os.cpu_count() or 1
    wall = after.wall_s - before.wall_s
    if wall <= 0 or math.isnan(before.busy_s) or math.isnan(after.busy_s):
        return math.nan
    others = (after.busy_s - before.busy_s) - (after.own_s - before.own_s)
    return min(1.0, max(0.0, others / (wall * cores)))
