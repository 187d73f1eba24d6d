"""Shared test fixtures.

``device`` runs a test once per device: cpu, and cuda (marked ``gpu``; skipped
with the reason where there is no CUDA device or no CUDA kernel).

Random inputs are fresh on every run (the seed comes from the clock) but
reproducible: the seed is printed in the header, and FUSEDBENCH_TEST_SEED=N
replays a run.
"""

from __future__ import annotations

import os
import time
import zlib

import pytest
import torch

_SEED = int(os.environ.get("FUSEDBENCH_TEST_SEED", time.time_ns() % 2**31))
# pytest-xdist workers are child processes started after this file is read:
# through the environment they all draw from the one seed the header prints.
os.environ["FUSEDBENCH_TEST_SEED"] = str(_SEED)
# The suite tests the delivered build, which `invoke test` builds: every kernel version. A benchmark task a test
# runs (its build first) would otherwise rebuild the checkout's libraries with the one version this CPU runs
# (env/builder/config.py), under the feet of the tests loading them. Tests of that choice set the variable
# themselves.
os.environ["FUSEDBENCH_CORE_VERSIONS"] = "all"


def pytest_report_header(config):
    return f"fusedbench random seed: {_SEED} (replay with FUSEDBENCH_TEST_SEED={_SEED})"


@pytest.fixture
def generator(request) -> torch.Generator:
    """A torch.Generator seeded from the run seed and the test's name (independent streams per test)."""
    g = torch.Generator()
    g.manual_seed((_SEED + zlib.crc32(request.node.nodeid.encode())) % 2**31)
    return g


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request) -> str:
    if request.param == "cuda":
        from tests.helpers.devices import cuda_skip_reason

        reason = cuda_skip_reason()
        if reason is not None:
            pytest.skip(reason)
    return request.param


# --- seeds of the emulated CUDA tests' random schedules (tests/helpers/emulated_kernels.py) ---------------------
# Each emulated test runs every fixed order and, per random kind, this many seeds drawn from the run seed above.
def pytest_addoption(parser):
    parser.addoption(
        "--emu-seeds",
        type=int,
        default=None,
        metavar="N",
        help="random scheduling seeds per emulated CUDA test (default 1; env FUSEDBENCH_EMU_SEEDS)",
    )


def pytest_configure(config):
    seeds = config.getoption("--emu-seeds")
    if seeds is not None:
        if seeds < 1:
            raise pytest.UsageError(f"--emu-seeds {seeds}: expected a whole number >= 1")
        os.environ["FUSEDBENCH_EMU_SEEDS"] = str(seeds)
