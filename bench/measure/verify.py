"""Check a baseline's output against the float64 reference before it is timed.

A fast wrong baseline is a failure, not a row: :func:`verify` raises.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from ops.reference import Tolerance


class VerificationError(AssertionError):
    """A baseline's output differs from the reference (the message says where and by how much)."""


def verify_outputs(output: object, reference: Tensor | tuple[Tensor, ...], tolerance: Tolerance) -> float:
    """:func:`verify` of each output against its reference; ``reference`` a tuple where the call returns several.

    Returns the largest error of any output.
    """
    if not isinstance(reference, tuple):
        return verify(output, reference, tolerance, "output")
    outputs = list(output) if isinstance(output, Sequence) else [output]
    if len(outputs) != len(reference):
        raise VerificationError(f"expected {len(reference)} outputs, got {len(outputs)}")
    return max(verify(o, r, tolerance, f"output {i}") for i, (o, r) in enumerate(zip(outputs, reference, strict=True)))


# Elements compared at a time: the float64 temporaries of a whole 256 MiB output (its copy, the error, the
# bound: 512 MiB each) cost more in page faults than the comparison itself; chunks of 1 Mi elements stay warm.
CHUNK_ELEMENTS = 1 << 20


def verify(output: object, reference: Tensor, tolerance: Tolerance, what: str) -> float:
    """Raise VerificationError unless |out - ref| <= atol + rtol * |ref| everywhere; return the max error.

    Every element is compared, a chunk of CHUNK_ELEMENTS at a time.
    """
    out = _flat_values(output)
    if tuple(out.shape) != tuple(reference.shape):
        raise VerificationError(f"{what}: output shape {list(out.shape)}, expected {list(reference.shape)}")
    flat_out, flat_ref = out.reshape(-1), torch.as_tensor(reference).reshape(-1)
    largest, not_finite, bad, worst, worst_excess = 0.0, 0, 0, -1, -math.inf
    for start in range(0, flat_out.numel(), CHUNK_ELEMENTS):
        chunk = flat_out[start : start + CHUNK_ELEMENTS]
        ref = flat_ref[start : start + CHUNK_ELEMENTS]
        # NaN where the reference is finite: an element was not written (buffers start as NaN) or overflowed.
        finite = torch.isfinite(chunk)
        if not_finite or not bool(finite.all()):
            not_finite += int((~finite).sum())
            continue
        error = chunk.to(torch.float64, copy=True).sub_(ref).abs_()  # a copy even of float64: never the output
        largest = max(largest, float(error.max()))
        excess = error.sub_(tolerance.bound(ref))
        over = int((excess > 0).sum())
        if over:
            bad += over
            index = int(torch.argmax(excess))
            if float(excess[index]) > worst_excess:
                worst, worst_excess = start + index, float(excess[index])
    if not_finite:
        raise VerificationError(f"{what}: {not_finite} of {flat_out.numel()} outputs are not finite")
    if bad:
        raise VerificationError(
            f"{what}: {bad} of {flat_out.numel()} outputs differ from the float64 reference beyond "
            f"{tolerance.atol:g} + {tolerance.rtol:g}*|ref|; "
            f"worst at flat index {worst}: got {float(flat_out[worst]):.6g}, "
            f"expected {float(flat_ref[worst]):.6g}"
        )
    return largest


def _flat_values(output: object) -> Tensor:
    """A torch tensor, a numpy array, or a one-element list of either (ORT returns lists) -> a tensor in its dtype."""
    if isinstance(output, Sequence) and not isinstance(output, (str, bytes)):
        if len(output) != 1:
            raise VerificationError(f"expected one output, got {len(output)}")
        output = output[0]
    if isinstance(output, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(output))
    if isinstance(output, Tensor):
        return output.detach()
    raise VerificationError(f"output must be a tensor or an array, got {type(output).__name__}")
