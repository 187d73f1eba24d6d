"""The test suite's two tiers and the pytest command line that runs them.

One suite, split by the ``slow`` marker (pyproject.toml): the fast tier is
everything else and is what ``invoke test`` runs; the slow tier holds the
tests that take more than about 20 s on 2 cores (a second build, a cold
torch.compile, a real A/B run). CI runs the fast tier, then the slow tier, so
every test still runs there, and each run prints its 15 slowest tests.
"""

from __future__ import annotations

import os
import shlex
import sys

# tier -> the marker expression that selects it (None: every test)
TIERS = {"fast": "not slow", "slow": "slow", "all": None}

# Printed at the end of every run, so a new slow test shows up in the first run that adds it.
DURATIONS = 15


def default_workers(tier: str) -> int:
    """How many pytest-xdist processes a tier runs in when ``--workers`` is not given.

    The fast tier: two where this process may use two CPUs. Its time goes to
    compiler runs, ONNX exports and interpreter starts, which a second worker
    overlaps (measured on 2 cores: 164 s against 260-290 s in one process,
    docs/testing.md). Any run with the slow tier: one, because its tests time
    code (an A/B run must flag an injected slowdown), and a second worker on the
    same cores would make those timings noisier.
    """
    if tier != "fast":
        return 1
    return max(1, min(2, len(os.sched_getaffinity(0))))


def tier_of(all_tests: bool, slow_only: bool) -> str:
    """The tier the ``invoke test`` flags ask for; both flags together are refused."""
    if all_tests and slow_only:
        raise ValueError("--all and --slow-only exclude each other: --all already runs the slow tier")
    return "all" if all_tests else "slow" if slow_only else "fast"


def pytest_command(tier: str, k: str = "", workers: int = 1, extra: str = "") -> list[str]:
    """``python -m pytest`` for ``tier``; more than one worker runs the files in pytest-xdist processes."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {', '.join(TIERS)}, got {tier!r}")
    command = [sys.executable, "-m", "pytest", f"--durations={DURATIONS}"]
    if TIERS[tier] is not None:
        command += ["-m", TIERS[tier]]
    if k:
        command += ["-k", k]
    if workers > 1:
        # Whole files per worker: a module's fixtures (a tiny benchmark run, an
        # export) are built once, not once in each worker.
        command += ["-n", str(workers), "--dist", "loadfile"]
    return command + shlex.split(extra)
