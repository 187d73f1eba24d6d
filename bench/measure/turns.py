"""Taking turns on the CPU with another process: two builds' timed loops interleaved a few milliseconds apart.

On a shared VM the host's speed drifts from one window of tens of milliseconds
to the next, and a job measured a few seconds later in another process
catches another speed (measured: reports/ab_measure/README.md, "Why turns").
So an A/B run does not time one build's
job and then the other's: both workers run the same job at once, and only one
of them runs at any moment. The one whose turn it is times its samples for
TURN_S, then hands the CPU to the other (bench/ab/driver.py's driver passes the turn)
and waits. Each build's samples of a row are then spread over the same
windows, and the drift falls on both.

A handoff happens only between samples of a timed loop. A job waits for its
first turn just before its first warm-up (``begin``, from bench/run.py): what
comes before it is untimed (the case's inputs and reference, the first
variant's setup and output check), so both builds do it at once. From then on
setup, verification and warm-up run inside the turn of the process that does
them, so the other process never runs beside a timed sample. The time spent
waiting is not the timed loop's: ``measure`` (bench/measure/timing.py) subtracts it
from its budget, and the first call after a turn comes back is not timed (its
caches were the other process's).

Each turn starts with the process's thread moved onto the timing CPU
(bench/measure/pinning.py), not pinned there. Left alone, a thread wakes where it last
ran, so the two sides of a pair each keep a virtual CPU of their own, and the
two virtual CPUs of a VM can run at different speeds at the same moment; a
pair's two sides on CPUs of their own would read that as a difference of the
builds (measured: reports/ab_measure/README.md, "Each turn on the same CPU").

Outside an A/B worker no turn is taken (the default ``NO_TURNS``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.measure import machine
from bench.measure.pinning import move_to_timing_cpu

# How long one process times before it hands the CPU over: short against the host's slow drift (tens of
# milliseconds and more), long against a handoff (two pipe messages, about 0.1 ms on 2 cores).
TURN_S = 0.005


@dataclass(frozen=True)
class Pause:
    """One wait for the turn: how long, and the CPU the machine's processes used meanwhile (the other build's)."""

    waited_ns: int
    busy_s: float


class Turns:
    """One side of the turn-taking: ``wait`` blocks until the driver says it is this process's turn."""

    def __init__(self, wait: Callable[[], None], turn_s: float = TURN_S) -> None:
        self._wait = wait
        self.turn_ns = int(turn_s * 1e9)
        self.handoffs = 0
        self.begun = False
        self._since = time.perf_counter_ns()

    def begin(self) -> None:
        """Wait for the first turn, before the job's first warm-up; later calls return at once."""
        if self.begun:
            return
        self._wait()
        move_to_timing_cpu()
        self.begun = True
        self._since = time.perf_counter_ns()

    def pass_if_due(self) -> Pause | None:
        """Hand the CPU over when this turn has lasted TURN_S and wait for the next; None: this turn goes on."""
        now = time.perf_counter_ns()
        if now - self._since < self.turn_ns:
            return None
        busy_before = machine.snapshot().busy_s
        self._wait()
        move_to_timing_cpu()
        self.handoffs += 1
        self._since = time.perf_counter_ns()
        return Pause(self._since - now, machine.snapshot().busy_s - busy_before)


class _NoTurns(Turns):
    def __init__(self) -> None:
        super().__init__(lambda: None)

    def begin(self) -> None:
        pass

    def pass_if_due(self) -> Pause | None:
        return None


NO_TURNS: Turns = _NoTurns()
_current: Turns = NO_TURNS


def current() -> Turns:
    return _current


def use(turns: Turns | None) -> None:
    """Take turns through ``turns`` from now on (None: stop taking turns)."""
    global _current
    _current = turns or NO_TURNS
