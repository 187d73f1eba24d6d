"""Faults injected into a copy of csrc/core/fused_norm_cuda.cu by text edits.

The delivered kernels carry no fault switches: each fault is a regular
expression that must match a stated number of times (normally once) in the
current source, and its replacement. When the kernels are rewritten so that a pattern no longer
matches (or matches twice), ``Fault.apply`` fails loudly naming the fault,
rather than building an unchanged copy that would "pass" by catching nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


class FaultPatternError(AssertionError):
    """A fault's pattern did not match the kernel source exactly once."""


@dataclass(frozen=True)
class Fault:
    name: str
    pattern: str  # regular expression, must match `matches` times
    replacement: str
    symptom: str  # text the emulated tests report when they catch it
    matches: int = 1  # how many places the edit must change
    # Another (pattern, replacement) for the same fault in another form of the kernels: tried when the
    # first pattern matches nowhere.
    alternative: tuple[str, str] | None = None
    op: str = "norm"  # the op whose emulated cases must catch it (tests/helpers/emulated_kernels.py, OPS)

    def apply(self, source: str) -> str:
        edited, count = re.subn(self.pattern, self.replacement, source)
        if count == 0 and self.alternative is not None:
            edited, count = re.subn(*self.alternative, source)
        if count != self.matches:
            raise FaultPatternError(
                f"fault {self.name!r}: pattern {self.pattern!r} matches {count} times in fused_norm_cuda.cu "
                f"(expected {self.matches}): the kernels changed; update the pattern in tests/helpers/kernel_faults.py"
            )
        return edited

    def write_copy(self, source: Path, directory: Path) -> Path:
        """The edited copy of ``source`` in ``directory``/<name>/ (its includes resolve via -I csrc/core)."""
        out = directory / re.sub(r"\W+", "_", self.name) / source.name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(self.apply(source.read_text()))
        return out


# The faults the emulated tests must catch.
FAULTS = [
    Fault(
        "block barrier removed",
        # the only barrier: between writing the per-warp partial sums and reading them
        r"__syncthreads\(\);",
        "",
        "outside rtol",
    ),
    Fault(
        "tail loop stops one element early",
        # the streaming kernel's output loop over the row's vectors
        r"(for \(int64_t c = threadIdx\.x; c < )nvec(; c \+= blockDim\.x\) \{\s*P v;\s*body\.second_pass)",
        r"\1nvec - 1\2",
        "never written",
    ),
    Fault(
        "warp reduction skips a shuffle step",
        r"(for \(int offset = kWarpSize / 2; )offset > 0(; offset /= 2\))",
        r"\1offset > 1\2",
        "outside rtol",
    ),
    Fault(
        "vector path for a misaligned pointer",
        # x and y taken to share their phase whatever their addresses: y (or x) off x's (y's) 16-byte boundary
        # still gets 16-byte accesses
        r"(const uint64_t relative = )phase_distances\(p\);",
        r"\g<1>0;",
        "misaligned address",
    ),
    Fault(
        "weight and bias read as vectors off x's phase",
        # every row taken to be at weight's and bias's phase: their vector loads are misaligned in the rows of
        # an odd length that start elsewhere, and where weight or bias sits at another offset than x
        r"(__device__ __forceinline__ bool same_phase\(const T\* a, const T\* b\) \{(?:\s*//[^\n]*)*\s*return )[^;]*;",
        r"\g<1>true;",
        "misaligned address",
    ),
    Fault(
        "residual left out of the add's phases",
        # the vector width chosen from x, y and residual_out only: residual off x's phase still gets x's vectors
        r"(return phase_distances\(p\.norm\) \| )\(x \^ address_of\(p\.residual\)\) \| ",
        r"\1",
        "misaligned address",
        op="add",
    ),
    Fault(
        "the add's edge element not summed and stored",
        # a row's head and tail elements keep x as their value: residual_out is never written there
        r"if \(has_edge\) xe\.x = row\.value\(xe, split\.edge\(t\)\);",
        "",
        "never written",
        op="add",
    ),
    Fault(
        "the add's second pass re-reads x instead of the stored sum",
        # the streaming kernel normalises x where it should normalise x + residual (in place, residual is gone
        # by then: the sum must be read back)
        r"(v = load_streaming\(reinterpret_cast<const P\*>\()residual_out(\) \+ i\);)",
        r"\1x\2",
        "outside rtol",
        op="add_inplace",
    ),
]

# Faults the emulator itself must turn into a clear error instead of a hang or a silent value.
BARRIER_IN_A_BRANCH = Fault(
    "barrier reached by lane 0 of each warp only",
    r"if \(lane == 0\) partials\[warp\] = v;\s*__syncthreads\(\);",
    "if (lane == 0) { partials[warp] = v; __syncthreads(); }",
    "deadlock in",
)
LANE_EXITS_BEFORE_THE_REDUCTION = Fault(
    "lane 5 of each warp exits before the warp reduction",
    r"(const int64_t first = static_cast<int64_t>\(blockIdx\.x\) \* kWarpRowsPerBlock)",
    r"if (threadIdx.x % kWarpSize == 5) return;\n  \1",
    "has exited",
)
HALF_WARP_SHUFFLE_MASK = Fault(
    "warp reduction with a half-warp mask",
    r"__shfl_xor_sync\(0xffffffffu, ",
    "__shfl_xor_sync(0x0000ffffu, ",
    "which is not in the mask",
)

# A race between consecutive rows of a block: both block kernels reuse one set of
# shared-memory slots for every row instead of alternating two, so a warp that
# runs ahead into the next row overwrites its partial sum before slower warps
# have read the previous one. Hidden when every thread runs in turn.
SHARED_SLOTS_REUSED = Fault(
    "one set of shared slots for consecutive rows",
    r"(row \+= gridDim\.x), parity \^= 1\)",
    r"\1)",
    "outside rtol",
    matches=2,
)

# A race on global memory: warps 0 and 1 (2 and 3) of a warp_rows block both normalise the block's first (third)
# row, so both write its y through the cache-hint stores, and the other rows stay unwritten.
ROWS_SHARED_BY_TWO_WARPS = Fault(
    "two warps of a block take the same row",
    r"(const int64_t first = static_cast<int64_t>\(blockIdx\.x\) \* kWarpRowsPerBlock \+ )threadIdx\.x / kWarpSize;",
    r"\1threadIdx.x / kWarpSize / 2 * 2;",
    "never written",
)

# For the AddressSanitizer probe: the warp kernel loads one vector past the row's end.
ROW_TAIL_OVERREAD = Fault(
    "vector load past the row's end",
    r"if \(c < nvec\) \{(\s*xv\[i\] = load_streaming\(xr \+ c\);\s*wr\[i\] = )",
    r"if (c <= nvec) {\1",
    "heap-buffer-overflow",
    # the same where the register kernels hold each vector as a packed machine word, loaded through the row's
    # streams
    alternative=(r"if \(c < nvec\) \{(\s*body\.load\(xv\[i\], c\);)", r"if (c <= nvec) {\1"),
)
