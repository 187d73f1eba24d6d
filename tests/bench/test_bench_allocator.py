"""The malloc policy a benchmark process fixes: fresh outputs page-fault alike whatever the process did before."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.measure import allocator
from env.paths import REPO_ROOT

# A fresh interpreter frees one large block first (by default that raises glibc's mmap threshold past 4 MiB),
# then allocates, touches and frees a 4 MiB torch tensor several times, with small tensors allocated between:
# the faults of each allocation. Unfixed, some of them come from the heap without faults and some do not, by
# the heap's state (seen here: [1021, 0, 1024, 1024, 1024] in one process, no zero in another).
_PROBE = """
import json, resource, sys
from bench.measure import allocator
if sys.argv[1] == "fixed":
    allocator.fix_malloc_policy()
import torch
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
big = torch.empty(16 * 2**20 // 4)
big.fill_(1.0)
del big
counts = []
pins = []
for _ in range(8):
    before = faults()
    block = torch.empty(4 * 2**20 // 4)
    block.fill_(2.0)
    counts.append(faults() - before)
    pins.append(torch.empty(256))
    del block
print(json.dumps({"faults": counts, "allocator": allocator.cpu_allocator()}))
"""
PAGES_4MIB = 4 * 2**20 // 4096


def _probe(mode: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, mode], cwd=REPO_ROOT, capture_output=True, text=True, check=True, timeout=120
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(allocator._glibc() is None, reason="glibc's malloc policy only exists with glibc")
def test_fixed_malloc_gives_every_large_block_fresh_pages_whatever_was_freed_before():
    probed = _probe("fixed")
    assert probed["allocator"].endswith("glibc mmap >= 128 KiB fixed")
    assert all(count >= PAGES_4MIB for count in probed["faults"]), probed["faults"]


def test_fixing_the_policy_twice_keeps_the_first_answer(monkeypatch):
    monkeypatch.setattr(allocator, "_policy", None)
    monkeypatch.setattr(allocator, "_glibc", lambda: None)
    assert allocator.fix_malloc_policy() == "malloc not fixed (no glibc)"
    monkeypatch.setattr(allocator, "_glibc", lambda: pytest.fail("asked again"))
    assert allocator.fix_malloc_policy() == "malloc not fixed (no glibc)"
    assert allocator.cpu_allocator().endswith("; malloc not fixed (no glibc)")
