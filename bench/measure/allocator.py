"""Where a benchmark process gets large fresh outputs from: glibc's malloc policy, fixed for the whole run.

torch's CPU allocator takes every block from malloc. glibc serves a block of
at least M_MMAP_THRESHOLD bytes with a fresh mapping that is unmapped on free,
so an op that allocates such an output pays one page fault per 4 KiB page on
every call. But the threshold moves by default: freeing a mapped block raises
it to that block's size (up to 32 MiB), after which such blocks come from the
heap, and the heap gives pages back only when its free top outgrows a trim
threshold that moves with it. Whether an allocating call faults then depends
on everything the process allocated and freed before: fresh processes of the
same code then differ several-fold in an allocating call's time, a bias
between the two processes of an A/B pair that has nothing to do with either
build (measured: reports/ab_measure/README.md, "Why the malloc policy is fixed").

Setting the threshold explicitly (mallopt) turns the adjustment off. The run
keeps glibc's starting value, 128 KiB: every block of at least that size is a
fresh mapping in every process, so every allocating call pays its page faults,
as the fresh-output copy limit does. Reports record the policy in ``cpu_allocator``, a machine fact
that ``compare`` checks.
"""

from __future__ import annotations

import ctypes
import os

# glibc's mallopt parameter number (malloc.h) and its starting threshold.
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 128 * 1024

_policy: str | None = None  # what fix_malloc_policy set in this process; None: nothing yet


def _glibc() -> ctypes.CDLL | None:
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
    except (ValueError, OSError, AttributeError):
        return None
    return ctypes.CDLL(None)


def fix_malloc_policy() -> str:
    """Fix glibc's mmap threshold at MMAP_THRESHOLD_BYTES for this process; return the policy as recorded.

    Idempotent; blocks allocated before keep where they are, so call it before a run allocates its cases.
    """
    global _policy
    if _policy is None:
        libc = _glibc()
        if libc is None:
            _policy = "malloc not fixed (no glibc)"
        elif libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) != 1:
            _policy = "malloc not fixed (mallopt refused)"
        else:
            _policy = f"glibc mmap >= {MMAP_THRESHOLD_BYTES // 1024} KiB fixed"
    return _policy


def cpu_allocator() -> str:
    """torch's large-block source (THP_MEM_ALLOC_ENABLE=1: it madvises huge pages) and the malloc policy.

    ``thp`` or ``default``, then, where this process fixed it, the malloc policy (``default; glibc mmap >= 128
    KiB fixed``): two reports whose allocating rows page-faulted under different rules are not comparable.
    """
    torch_side = "thp" if os.environ.get("THP_MEM_ALLOC_ENABLE", "0") == "1" else "default"
    return torch_side if _policy is None else f"{torch_side}; {_policy}"
