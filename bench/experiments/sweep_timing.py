"""What the one-process sweeps (offset_sweep.py, thread_sweep.py) share: block timing.

A sweep times blocks of back-to-back calls, each block BLOCK_S long, so that
the timer's cost is negligible and the host's drift between the contenders of
one repetition small.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

BLOCK_S = 0.002  # one timed block: long against the timer, short against the host's drift


def block_us(fn: Callable[[], object], calls: int) -> float:
    """Microseconds per call over ``calls`` back-to-back calls of ``fn``."""
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - start) / calls / 1e3


def calls_per_block(fn: Callable[[], object], probe_calls: int) -> int:
    """Calls that make a block last about BLOCK_S, from a probe of ``probe_calls`` calls."""
    per_call_s = max(block_us(fn, probe_calls) / 1e6, 1e-7)
    return max(1, math.ceil(BLOCK_S / per_call_s))
