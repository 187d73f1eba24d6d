"""Where a benchmark process gets large fresh outputs from: glibc's malloc policy, chosen for the whole run.

torch's CPU allocator takes every block from malloc. glibc serves a block of
at least M_MMAP_THRESHOLD bytes with a fresh mapping that is unmapped on free,
so an op that allocates such an output pays one page fault per 4 KiB page on
every call. But the threshold moves by default: freeing a mapped block raises
it to that block's size (up to 32 MiB), after which such blocks come from the
heap, and repeated calls of one size reuse heap memory without faults.

Two policies (``--allocator``):
  * ``default`` - glibc as a user's process has it. The headline and the
    targets use it: a model calls an op of one size again and again, so after
    the warm-up (which makes the first frees, raising the threshold) its
    allocating calls are served from the heap. Measured at 4x64x768 fp32, one
    thread: the fused call 54 us and 0 faults a call, the unfused 365 us.
  * ``fixed-mmap`` - the threshold fixed at glibc's starting value, 128 KiB
    (mallopt turns the adjustment off): every block of at least that size is a
    fresh mapping in every process, so every allocating call pays its page
    faults, as the fresh-output copy limit does. That is the page-fault study:
    the same fused call took 518 us and 193 faults a call. Under the default
    policy whether a call faults can depend on what the process allocated and
    freed before (eight fresh processes of one code, fused call at 8x128x1024:
    two took 670 faults a call, six one), so the fixed policy is also the one
    that makes such rows alike in every process.
Each row records its policy in ``malloc_policy``; ``cpu_allocator`` (a machine
fact that ``compare`` checks) says it too, so reports measured under
different policies are not compared.
"""

from __future__ import annotations

import ctypes
import os

# glibc's mallopt parameter number (malloc.h) and its starting threshold.
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 128 * 1024

DEFAULT = "default"
FIXED_MMAP = "fixed-mmap"
POLICIES = (DEFAULT, FIXED_MMAP)

_policy: str | None = None  # the policy set_malloc_policy chose in this process (a POLICIES name); None: none yet
_described: str | None = None  # what it amounted to, as cpu_allocator records it


def _glibc() -> ctypes.CDLL | None:
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
    except (ValueError, OSError, AttributeError):
        return None
    return ctypes.CDLL(None)


def check_policy(policy: str) -> str:
    """``policy`` when it is one of POLICIES; ValueError naming the option otherwise."""
    if policy not in POLICIES:
        raise ValueError(f"--allocator must be one of {', '.join(POLICIES)}, got {policy!r}")
    return policy


def set_malloc_policy(policy: str = DEFAULT) -> str:
    """Choose this process's malloc policy (POLICIES); return it as ``cpu_allocator`` records it.

    Call it before a run allocates its cases: blocks allocated before keep where they are. Once chosen, the
    policy stays (mallopt cannot be undone); asking for another one then is an error.
    """
    global _policy, _described
    check_policy(policy)
    if _policy is not None:
        if policy != _policy:
            raise ValueError(f"--allocator {policy!r}: this process already runs under {_policy!r}")
        return _described
    if policy == DEFAULT:
        _described = "glibc default (mmap threshold adapts)" if _glibc() is not None else "malloc default (no glibc)"
    else:
        libc = _glibc()
        if libc is None:
            _described = "malloc not fixed (no glibc)"
        elif libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) != 1:
            _described = "malloc not fixed (mallopt refused)"
        else:
            _described = f"glibc mmap >= {MMAP_THRESHOLD_BYTES // 1024} KiB fixed"
    _policy = policy
    return _described


def fix_malloc_policy() -> str:
    """The page-fault study's policy: glibc's mmap threshold fixed at MMAP_THRESHOLD_BYTES (see above)."""
    return set_malloc_policy(FIXED_MMAP)


def malloc_policy() -> str:
    """The policy this process runs under, for the ``malloc_policy`` column (``default`` when none was chosen)."""
    return _policy or DEFAULT


def cpu_allocator() -> str:
    """torch's large-block source (THP_MEM_ALLOC_ENABLE=1: it madvises huge pages) and the malloc policy.

    ``thp`` or ``default``, then, where this process chose one, the malloc policy (``default; glibc mmap >= 128
    KiB fixed``): two reports whose allocating rows page-faulted under different rules are not comparable.
    """
    torch_side = "thp" if os.environ.get("THP_MEM_ALLOC_ENABLE", "0") == "1" else "default"
    return torch_side if _described is None else f"{torch_side}; {_described}"
