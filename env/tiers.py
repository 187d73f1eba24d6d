"""The test suite's two tiers and the pytest command lines that run them.

One suite, split by the ``slow`` marker (pyproject.toml): the fast tier is
everything else and is what ``invoke test`` runs; the slow tier holds the
tests that take more than about 20 s on 2 cores (a second build, a cold
torch.compile, a real A/B run). CI runs the fast tier, then the slow tier, so
every test still runs there, and each run prints its 15 slowest tests.

A tier runs in passes. Tests marked ``timed`` judge times they measure (an
A/B verdict on a slowed commit, a deadline), so they run in a pass of their
own, one process, with no other test beside them. Every other test runs in
a pass of two pytest-xdist processes where two CPUs are usable: its time is
compiler runs, exports and interpreter starts, which a second worker
overlaps (docs/testing.md).
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass

# tier -> the marker expression that selects it (None: every test)
TIERS = {"fast": "not slow", "slow": "slow", "all": None}
TIMED = "timed"

# Printed at the end of every run, so a new slow test shows up in the first run that adds it.
DURATIONS = 15
# pytest's exit status when a run selected no test (a -k that matches nothing in one pass).
NO_TESTS_COLLECTED = 5


@dataclass(frozen=True)
class Pass:
    marker: str | None  # the marker expression this pass selects (None: every test)
    workers: int


def default_workers() -> int:
    """pytest-xdist processes for the untimed tests: two where this process may use two CPUs."""
    return max(1, min(2, len(os.sched_getaffinity(0))))


def tier_of(all_tests: bool, slow_only: bool) -> str:
    """The tier the ``invoke test`` flags ask for; both flags together are refused."""
    if all_tests and slow_only:
        raise ValueError("--all and --slow-only exclude each other: --all already runs the slow tier")
    return "all" if all_tests else "slow" if slow_only else "fast"


def passes(tier: str, workers: int | None = None) -> list[Pass]:
    """The passes that run ``tier``: its untimed tests in ``workers`` processes (default :func:`default_workers`),
    then its timed ones alone (the fast tier's: the timing loop's own tests on busy-wait calls)."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {', '.join(TIERS)}, got {tier!r}")
    untimed = workers if workers is not None else default_workers()
    selected = TIERS[tier]
    both = (lambda extra: f"{selected} and {extra}") if selected else (lambda extra: extra)
    return [Pass(both(f"not {TIMED}"), untimed), Pass(both(TIMED), 1)]


def pytest_command(step: Pass, k: str = "", extra: str = "") -> list[str]:
    """``python -m pytest`` for one pass; more than one worker runs the files in pytest-xdist processes."""
    command = [sys.executable, "-m", "pytest", f"--durations={DURATIONS}"]
    if step.marker is not None:
        command += ["-m", step.marker]
    if k:
        command += ["-k", k]
    if step.workers > 1:
        # Whole files per worker: a module's fixtures (a tiny benchmark run, an
        # export) are built once, not once in each worker.
        command += ["-n", str(step.workers), "--dist", "loadfile"]
    return command + shlex.split(extra)


def run_passes(steps: list[Pass], run, k: str = "", extra: str = "") -> int:
    """Run each pass's command with ``run`` (command -> exit status); the tier's status.

    A pass that selects nothing is not a failure while another pass ran tests (a ``-k`` that names only timed
    tests); a tier that selects nothing at all is, as pytest says of one run.
    """
    statuses = [run(pytest_command(step, k=k, extra=extra)) for step in steps]
    failed = [s for s in statuses if s not in (0, NO_TESTS_COLLECTED)]
    if failed:
        return failed[0]
    return 0 if 0 in statuses else NO_TESTS_COLLECTED
