"""The CPU the measuring thread runs on while a variant is timed.

The virtual CPUs of a VM are not equal, and left to the scheduler a process's
main thread stays on whichever CPU it started on, so that choice becomes a
bias of the process. Measured on the 2-CPU development VM in fresh processes,
one after the other, with nothing else running: a no-op torch call took
1.7-2.1 us with the process pinned to CPU 1, 1.9-3.7 us pinned to CPU 0, and
1.7-4.1 us left to the scheduler.

So a single-threaded timed loop runs with its calling thread pinned to one
CPU: the highest-numbered one the process may use, away from CPU 0, which
takes most interrupts. It is unpinned right after, so the thread pools a
variant creates while it is set up (OpenMP's on the first parallel op, ONNX
Runtime's in each session) inherit every CPU. With a single CPU nothing
changes.

A loop whose calls run on more than one thread is not pinned. Its parallel
regions need a free core for each thread, and a pinned calling thread cannot
move out of the way of a pool thread that the scheduler left on its CPU: the
region then waits for the scheduler's tick. Measured on the 2-CPU VM, the
fused op at 8x128x1024 with 2 threads, while other processes ran: 8.0 ms a
call pinned against 1.0 ms unpinned.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


def timing_cpu() -> int | None:
    """The CPU timed loops pin to; None where the calling thread may use only one (or the OS cannot pin)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = os.sched_getaffinity(0)
    return max(cpus) if len(cpus) > 1 else None


def move_to_timing_cpu() -> int | None:
    """Move the calling thread onto :func:`timing_cpu` and leave it free to move on (returns that CPU).

    Not pinned: a pool thread can still take the other CPU. Taking turns with
    another process, each side's thread otherwise wakes on the CPU it last ran
    on, so the two sides of an A/B pair sit on different virtual CPUs, whose
    speeds differ from one moment to the next (see bench/measure/turns.py).
    """
    cpu = timing_cpu()
    if cpu is None:
        return None
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})  # the kernel migrates the caller before this returns
    os.sched_setaffinity(0, allowed)
    return cpu


@contextmanager
def pinned_for_timing(threads: int = 1) -> Iterator[int | None]:
    """Pin the calling thread to :func:`timing_cpu` for the block (yields it), then restore its CPUs.

    ``threads``: the threads the timed calls run on; with more than one nothing is pinned (yields None).
    """
    cpu = timing_cpu() if threads == 1 else None
    if cpu is None:
        yield None
        return
    allowed = os.sched_getaffinity(0)  # 0: the calling thread, not the whole process
    os.sched_setaffinity(0, {cpu})
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, allowed)
