"""The malloc policies a benchmark process runs under: glibc as a user has it, or fixed for the page-fault study."""

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
allocator.set_malloc_policy(sys.argv[1])
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
print(json.dumps({"faults": counts, "allocator": allocator.cpu_allocator(), "policy": allocator.malloc_policy()}))
"""
PAGES_4MIB = 4 * 2**20 // 4096

# A model's repeated call: an op writing a fresh 768 KiB output (4x64x768 float32) sixteen times in a row.
_REPEATED_CALL = """
import json, resource, sys
from bench.measure import allocator
allocator.set_malloc_policy(sys.argv[1])
import torch
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
x = torch.randn(4 * 64 * 768)
counts = []
for _ in range(16):
    before = faults()
    y = x * 2.0
    counts.append(faults() - before)
    del y
print(json.dumps({"faults": counts, "allocator": allocator.cpu_allocator(), "policy": allocator.malloc_policy()}))
"""
PAGES_768KIB = 768 * 1024 // 4096


def _probe(mode: str, probe: str = _PROBE) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", probe, mode], cwd=REPO_ROOT, capture_output=True, text=True, check=True, timeout=120
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(allocator._glibc() is None, reason="glibc's malloc policy only exists with glibc")
def test_fixed_malloc_gives_every_large_block_fresh_pages_whatever_was_freed_before():
    probed = _probe("fixed-mmap")
    assert probed["allocator"].endswith("glibc mmap >= 128 KiB fixed") and probed["policy"] == "fixed-mmap"
    assert all(count >= PAGES_4MIB for count in probed["faults"]), probed["faults"]


@pytest.mark.skipif(allocator._glibc() is None, reason="glibc's malloc policy only exists with glibc")
def test_default_malloc_serves_repeated_large_blocks_from_the_heap_in_steady_state():
    # What a model's repeated calls see: once frees have raised the threshold past the output's size, the
    # output comes back from the heap without faults (seen here after 2-8 calls); fixed, every call faults.
    # Not every later call: where the freed output leaves more free memory at the heap's top than the trim
    # threshold (twice the raised mmap threshold), glibc returns it and the next call faults again (seen
    # under a parallel test run: [240, 0, 192, 193, 192, 192, ..., 0, 192, 0, 0]).
    probed = _probe("default", _REPEATED_CALL)
    assert probed["allocator"].endswith("glibc default (mmap threshold adapts)") and probed["policy"] == "default"
    steady = probed["faults"][-8:]
    assert probed["faults"][0] >= PAGES_768KIB and sum(count == 0 for count in steady) >= 4, probed["faults"]
    fixed = _probe("fixed-mmap", _REPEATED_CALL)["faults"]
    assert all(count >= PAGES_768KIB for count in fixed), fixed


def test_an_unknown_policy_is_refused_naming_the_option():
    with pytest.raises(ValueError, match=r"--allocator must be one of default, fixed-mmap, got 'mmap'"):
        allocator.check_policy("mmap")


def test_a_second_policy_in_one_process_is_refused(monkeypatch):
    # mallopt cannot be undone: a process that fixed the threshold cannot measure the default policy.
    monkeypatch.setattr(allocator, "_policy", None)
    monkeypatch.setattr(allocator, "_described", None)
    monkeypatch.setattr(allocator, "_glibc", lambda: None)
    allocator.set_malloc_policy("fixed-mmap")
    with pytest.raises(ValueError, match="already runs under 'fixed-mmap'"):
        allocator.set_malloc_policy("default")


def test_fixing_the_policy_twice_keeps_the_first_answer(monkeypatch):
    monkeypatch.setattr(allocator, "_policy", None)
    monkeypatch.setattr(allocator, "_described", None)
    monkeypatch.setattr(allocator, "_glibc", lambda: None)
    assert allocator.fix_malloc_policy() == "malloc not fixed (no glibc)"
    monkeypatch.setattr(allocator, "_glibc", lambda: pytest.fail("asked again"))
    assert allocator.fix_malloc_policy() == "malloc not fixed (no glibc)"
    assert allocator.cpu_allocator().endswith("; malloc not fixed (no glibc)")
