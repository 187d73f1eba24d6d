"""Fixture histories, written fresh by each test (bench/history/synthetic.py) from the run's seed."""

from __future__ import annotations

import os
import zlib

from bench.history.synthetic import History, Machine

ZEN = Machine("zen vm", "id-zen", "AMD EPYC")
XEON = Machine("xeon vm", "id-xeon", "Intel(R) Xeon(R) Processor", noise=0.03, scale=1.4)
REGRESSED_ROW = ("op", "8x128x1024", "float32", "fused", "call", "cpu", "page_offset")


def seed_of(request) -> int:
    """Each test's own stream from the run's seed (tests/conftest.py prints it)."""
    return (int(os.environ["FUSEDBENCH_TEST_SEED"]) + zlib.crc32(request.node.nodeid.encode())) % 2**31


def aa_history(seed: int, commits: int = 6, with_samples: bool = True) -> History:
    return History((ZEN, XEON), commits, with_samples=with_samples, seed=seed)


def regressed_history(seed: int, commits: int = 6, slowdown: float = 1.3) -> History:
    """Identical code throughout, but the fused call of one row ``slowdown`` x slower in each machine's last report."""
    history = aa_history(seed, commits)
    history.slowdown = {REGRESSED_ROW: (commits - 1, slowdown)}
    return history
