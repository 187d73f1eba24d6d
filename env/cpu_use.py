"""How much of the machine's CPU a step used: whether a slow step is waiting or at its floor.

A step that keeps every usable CPU busy for its whole wall time (compilers,
Inductor's graph compiles, ONNX exports side by side) cannot finish sooner on
this machine without doing less work; one that uses half of them can. The
CPU time counted is this process's and that of the child processes it has
waited for (user and system), which is what a build's compiler processes
are once they have exited.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass

# At or above this share of the usable CPUs a step is called CPU-bound: the rest is its serial start and end.
FLOOR_SHARE = 0.9


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, which a container's CPU set narrows)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True)
class CpuUse:
    wall_s: float
    cpu_s: float
    cpus: int

    @property
    def share(self) -> float:
        """CPU seconds used over those the usable CPUs had in the wall time (0 for an instant step)."""
        return self.cpu_s / (self.wall_s * self.cpus) if self.wall_s > 0 else 0.0

    def line(self, step: str) -> str:
        verdict = "CPU-bound: more cores or less work shorten it" if self.share >= FLOOR_SHARE else "not CPU-bound"
        return (
            f"{step}: {self.wall_s:.1f} s, {self.cpu_s:.0f} CPU-s of the {self.wall_s * self.cpus:.0f} that "
            f"{self.cpus} CPU(s) had ({100 * self.share:.0f} %; {verdict})"
        )


class CpuClock:
    """Started at construction; :meth:`read` gives the wall and CPU time since (children counted once waited)."""

    def __init__(self) -> None:
        self._wall, self._cpu = time.perf_counter(), _cpu_seconds()

    def read(self) -> CpuUse:
        return CpuUse(time.perf_counter() - self._wall, _cpu_seconds() - self._cpu, usable_cpus())
