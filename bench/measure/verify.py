"""Check a baseline's output against the float64 reference before it is timed.

A fast wrong baseline is a failure, not a row: :func:`verify` raises.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from ops.reference import Tolerance


class VerificationError(AssertionError):
    """A baseline's output differs from the reference (the message says where and by how much)."""


def as_float64(output: object) -> Tensor:
    """A torch tensor, a numpy array, or a one-element list of either (ORT returns lists) -> float64 tensor."""
    if isinstance(output, Sequence) and not isinstance(output, (str, bytes)):
        if len(output) != 1:
            raise VerificationError(f"expected one output, got {len(output)}")
        output = output[0]
    if isinstance(output, np.ndarray):
        return torch.from_numpy(np.asarray(output, dtype=np.float64))
    if isinstance(output, Tensor):
        return output.detach().to(torch.float64)
    raise VerificationError(f"output must be a tensor or an array, got {type(output).__name__}")


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


def verify(output: object, reference: Tensor, tolerance: Tolerance, what: str) -> float:
    """Raise VerificationError unless |out - ref| <= atol + rtol * |ref| everywhere; return the max error."""
    out = as_float64(output)
    if tuple(out.shape) != tuple(reference.shape):
        raise VerificationError(f"{what}: output shape {list(out.shape)}, expected {list(reference.shape)}")
    finite = torch.isfinite(out)
    if not bool(finite.all()):
        # NaN where the reference is finite: an element was not written (buffers start as NaN) or overflowed.
        raise VerificationError(f"{what}: {int((~finite).sum())} of {out.numel()} outputs are not finite")
    error = (out - reference).abs()
    bound = tolerance.bound(reference)
    bad = error > bound
    if bool(bad.any()):
        worst = int(torch.argmax(error - bound))
        raise VerificationError(
            f"{what}: {int(bad.sum())} of {out.numel()} outputs differ from the float64 reference beyond "
            f"{tolerance.atol:g} + {tolerance.rtol:g}*|ref|; "
            f"worst at flat index {worst}: got {out.flatten()[worst].item():.6g}, "
            f"expected {reference.flatten()[worst].item():.6g}"
        )
    return float(error.max()) if error.numel() else 0.0
