"""The build step's CPU reading: a waited-for child's CPU time counts, a sleep's wall time does not."""

from __future__ import annotations

import resource
import subprocess
import sys
import time

import pytest

from env.cpu_use import FLOOR_SHARE, CpuClock, CpuUse, usable_cpus

SPIN = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def test_a_child_that_spins_counts_once_waited_and_a_sleep_does_not():
    clock = CpuClock()
    before = _children_cpu()
    subprocess.run([sys.executable, "-c", SPIN.format(s=0.6)], check=True)
    child = _children_cpu() - before  # the kernel's own count of the child, read here independently
    time.sleep(0.3)
    used = clock.read()
    assert child >= 0.6
    assert child <= used.cpu_s <= child + 0.2  # the child's, and this process's little beside it
    assert used.wall_s >= child + 0.3
    assert used.cpus == usable_cpus() >= 1
    assert used.share == pytest.approx(used.cpu_s / (used.wall_s * used.cpus))


def test_the_line_states_the_share_and_whether_the_step_is_cpu_bound():
    busy = CpuUse(wall_s=60.0, cpu_s=114.0, cpus=2)
    assert busy.share == pytest.approx(0.95) and busy.share >= FLOOR_SHARE
    assert busy.line("build step") == (
        "build step: 60.0 s, 114 CPU-s of the 120 that 2 CPU(s) had (95 %; CPU-bound: more cores or less work "
        "shorten it)"
    )
    idle = CpuUse(wall_s=60.0, cpu_s=30.0, cpus=2)
    assert idle.line("build step").endswith("(25 %; not CPU-bound)")
    assert CpuUse(wall_s=0.0, cpu_s=0.0, cpus=2).share == 0.0
