"""bench/machine.py: the share of the CPU other processes used while something was timed."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

from bench.machine import CpuSnapshot, other_cpu_seconds, other_cpu_share, snapshot


def test_arithmetic_subtracts_this_process_and_clamps():
    before = CpuSnapshot(busy_s=100.0, own_s=10.0, wall_s=1000.0)
    # 2 s wall on 2 cores = 4 core-seconds; 3 busy, 1 of them ours -> others 2 s, a share of 2/4.
    assert other_cpu_seconds(before, CpuSnapshot(103.0, 11.0, 1002.0)) == 2.0
    assert other_cpu_share(2.0, 2.0, cores=2) == 0.5
    assert other_cpu_seconds(before, CpuSnapshot(100.5, 11.0, 1002.0)) == 0.0  # clock-tick rounding below zero
    assert math.isnan(other_cpu_seconds(before, CpuSnapshot(math.nan, 11.0, 1002.0)))
    assert math.isnan(other_cpu_share(0.0, 0.05, cores=2))  # too short a window for 10 ms ticks
    assert other_cpu_share(9.0, 2.0, cores=2) == 1.0


def _cpu_seconds_of(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_a_busy_neighbour_is_counted_as_other():
    child = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 3\nwhile time.time() < end: pass"])
    try:
        time.sleep(0.3)  # let it start
        child_before, before = _cpu_seconds_of(child.pid), snapshot()
        end = time.perf_counter() + 1.0
        while time.perf_counter() < end:  # our own busy loop meanwhile: it is not "other"
            pass
        child_after, after = _cpu_seconds_of(child.pid), snapshot()
    finally:
        child.kill()
        child.wait()
    others_s = other_cpu_seconds(before, after)
    child_s = child_after - child_before
    assert child_s > 0.05  # the neighbour did run (however busy the machine is)
    # Everything the neighbour burned is attributed to others (give or take clock-tick rounding).
    assert others_s >= child_s - 0.05
