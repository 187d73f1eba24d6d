"""What the machine did while something was timed, besides running it.

  * Other processes: on a small machine shared with other work, a 2-thread op
    waits for a core whenever anything else runs: its time then measures the
    neighbours. Each report row records the share of all cores that OTHER
    processes used during its timed loop (/proc/stat busy time minus this
    process's CPU time), so a reader - and `invoke compare` - can tell a slow
    kernel from a busy machine.
  * Page faults: a call that allocates a large fresh output makes the kernel
    map (and zero) new 4 KiB pages, and what that costs differs several-fold
    between machines. The minor page faults of this process (all its threads,
    getrusage) over the timed loop say how much of a row's time is the OS's.
  * Transparent huge pages: the kernel's mode decides whether such a fresh
    output costs one fault per 4 KiB or per 2 MiB.
"""

from __future__ import annotations

import math
import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

_PROC_STAT = Path("/proc/stat")
_THP_DIR = Path("/sys/kernel/mm/transparent_hugepage")
MIN_WINDOW_S = 0.1
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class CpuSnapshot:
    busy_s: float  # all cores, all processes; NaN where /proc/stat is unavailable
    own_s: float  # this process, all threads
    wall_s: float
    minor_faults: int = 0  # this process, all threads, since it started


def _busy_seconds() -> float:
    try:
        fields = _PROC_STAT.read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return math.nan
    ticks = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / _TICKS


def snapshot() -> CpuSnapshot:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # microsecond resolution, all threads of this process
    return CpuSnapshot(
        busy_s=_busy_seconds(), own_s=usage.ru_utime + usage.ru_stime, wall_s=time.monotonic(), minor_faults=usage.ru_minflt
    )


def minor_faults(before: CpuSnapshot, after: CpuSnapshot) -> int:
    """Minor page faults this process took between two snapshots (pages mapped without disk I/O)."""
    return after.minor_faults - before.minor_faults


def other_cpu_seconds(before: CpuSnapshot, after: CpuSnapshot) -> float:
    """CPU seconds (all cores) that other processes used between two snapshots; NaN without /proc/stat."""
    if math.isnan(before.busy_s) or math.isnan(after.busy_s):
        return math.nan
    return max(0.0, (after.busy_s - before.busy_s) - (after.own_s - before.own_s))


def other_cpu_share(others_s: float, wall_s: float, cores: int | None = None) -> float:
    """Fraction (0..1) of all cores' time that other processes used in ``wall_s`` seconds.

    /proc/stat counts in clock ticks (10 ms): windows shorter than MIN_WINDOW_S
    cannot say anything and give NaN.
    """
    cores = cores or os.cpu_count() or 1
    if not wall_s >= MIN_WINDOW_S or math.isnan(others_s):
        return math.nan
    return min(1.0, others_s / (wall_s * cores))


def transparent_huge_pages(thp_dir: Path = _THP_DIR) -> str:
    """The kernel's transparent-huge-page modes, e.g. "enabled=madvise defrag=madvise"; "unknown" without sysfs.

    Each sysfs file lists the choices with the active one in brackets
    ("always [madvise] never"). ``enabled=madvise`` means only memory that asks
    for huge pages (torch with THP_MEM_ALLOC_ENABLE=1) gets them; ``defrag``
    says whether a fault may stall to compact memory into a huge page.
    """
    modes = []
    for name in ("enabled", "defrag"):
        try:
            text = (thp_dir / name).read_text()
        except OSError:
            return "unknown"
        active = [word[1:-1] for word in text.split() if word.startswith("[") and word.endswith("]")]
        modes.append(f"{name}={active[0] if active else 'unknown'}")
    return " ".join(modes)
