"""How long two of torch's threads take to meet: a reading of where the host has put the VM's vCPUs.

A VM's vCPUs are threads of the host, and the host moves them. On the 2-vCPU
development VM the round trip of a cache line between the two vCPUs reads
about 55 ns for seconds on end, then about 310 ns for seconds on end (two
vCPUs sharing a last-level cache, then not), with nothing in the VM changing
(`bench/experiments/core_placement.py`). A call whose threads meet often pays
it: the small model forward at two threads read 575 or 775 us, ONNX
Runtime's op at 8x128x1024 180 or 222 us, each process landing on one level
or switching between them mid-row. Single-threaded rows do not see it.

So a CPU row timed on two or more threads is bracketed by this probe: the
median time of a torch add split over two threads (two of its 32768-element
grains: one per thread), which reads 5.9 us on the near placement and 7.9 us
on the far one there. The row's unit keeps the larger of the two readings (a
placement that changed during the row is not the near one), and a comparison
of two separate reports withholds the verdicts the placements explain
(bench/stats/placement.py).
"""

from __future__ import annotations

import math
import time

import torch

PROBE_ELEMENTS = 2 * 32768  # torch's parallel grain is 32768 elements: exactly one grain per thread of two
PROBE_CALLS = 100  # about 0.6-0.8 ms on the development VM
PROBE_WARMUP = 10

_buffers: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None


def _probe_buffers() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    global _buffers
    if _buffers is None:
        generator = torch.Generator().manual_seed(0)
        a, b = torch.randn(PROBE_ELEMENTS, generator=generator), torch.randn(PROBE_ELEMENTS, generator=generator)
        _buffers = (a, b, torch.empty(PROBE_ELEMENTS))
    return _buffers


def sync_probe_us(threads: int | None = None) -> float:
    """Median microseconds of a two-thread add; NaN where calls run on one thread (nothing to meet)."""
    threads = torch.get_num_threads() if threads is None else threads
    if threads < 2:
        return math.nan
    a, b, out = _probe_buffers()
    for _ in range(PROBE_WARMUP):
        torch.add(a, b, out=out)
    times = []
    for _ in range(PROBE_CALLS):
        start = time.perf_counter_ns()
        torch.add(a, b, out=out)
        times.append(time.perf_counter_ns() - start)
    times.sort()
    return times[len(times) // 2] / 1e3


def bracket(before: float, after: float) -> float:
    """A row's reading from the probes taken before and after it: the larger (NaN when either is NaN)."""
    if math.isnan(before) or math.isnan(after):
        return math.nan
    return max(before, after)
