"""Check a baseline's output against the float64 reference before it is timed.

A fast wrong baseline is a failure, not a row: :func:`verify` raises.

An output narrower than float64 is compared in float32 against an
:class:`Expected`: the reference rounded to float32 once, and each element's
allowed error in float32, tightened by that rounding and the comparison's own,
so that passing the float32 comparison implies |out - ref| <= atol + rtol *
|ref| in float64. It is stricter than that rule by at most one float32 ulp of
the reference (1.2e-7 of |ref|: the rounded reference may lie on the other side
of the output), against tolerances of 1e-4 of it and looser.
A round prepares it once per case (:class:`CaseReferences`) and compares every variant's output with it:
at 32x512x4096 float32 a comparison takes 0.32 s instead of 1.29 s in float64
(1 thread), and a worker compares about 39 outputs of that size.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ops.reference import Tolerance


class VerificationError(AssertionError):
    """A baseline's output differs from the reference (the message says where and by how much)."""


# Elements compared at a time: whole-tensor temporaries of a 256 MiB output cost more in page faults than the
# comparison itself; chunks of 1 Mi elements stay warm in the caches.
CHUNK_ELEMENTS = 1 << 20
# The float32 bound is shrunk by this share: it covers the bound's own rounding to float32 (2^-24) and the
# rounding of the float32 difference |out - near| (2^-24 each way), with room to spare.
_BOUND_SHRINK = 2.0**-20
_NARROW = (torch.float32, torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class Expected:
    """A float64 reference with its tolerance, and (where every element fits float32) the float32 comparison's
    operands: ``near``, the reference rounded to float32, and ``bound``, each element's allowed |out - near|:
    (atol + rtol * |ref| - |ref - near|) shrunk by _BOUND_SHRINK, in float32."""

    reference: Tensor  # float64, the output's shape
    tolerance: Tolerance
    near: Tensor | None  # float32, flat; None where the reference does not fit float32
    bound: Tensor | None

    @classmethod
    def of(cls, reference: Tensor, tolerance: Tolerance) -> Expected:
        reference = torch.as_tensor(reference)
        flat = reference.reshape(-1)
        if flat.dtype != torch.float64:
            return cls(reference, tolerance, None, None)
        near = torch.empty(flat.numel(), dtype=torch.float32)
        bound = torch.empty(flat.numel(), dtype=torch.float32)
        for start in range(0, flat.numel(), CHUNK_ELEMENTS):
            ref = flat[start : start + CHUNK_ELEMENTS]
            rounded = ref.to(torch.float32)
            if not bool(torch.isfinite(rounded).all()):
                return cls(reference, tolerance, None, None)
            slack = rounded.to(torch.float64).sub_(ref).abs_()
            allowed = tolerance.bound(ref).sub_(slack).mul_(1.0 - _BOUND_SHRINK)
            near[start : start + CHUNK_ELEMENTS] = rounded
            bound[start : start + CHUNK_ELEMENTS] = allowed
        return cls(reference, tolerance, near, bound)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.reference.shape)


def verify_outputs(
    output: object, reference: Tensor | Expected | tuple[Tensor | Expected, ...], tolerance: Tolerance
) -> float:
    """:func:`verify` of each output against its reference (a tensor, or :func:`prepare`'s); ``reference`` a
    tuple where the call returns several. Returns the largest error of any output."""
    if not isinstance(reference, tuple):
        return verify(output, reference, tolerance, "output")
    outputs = list(output) if isinstance(output, Sequence) else [output]
    if len(outputs) != len(reference):
        raise VerificationError(f"expected {len(reference)} outputs, got {len(outputs)}")
    return max(verify(o, e, tolerance, f"output {i}") for i, (o, e) in enumerate(zip(outputs, reference, strict=True)))


def prepare(reference: Tensor | tuple[Tensor, ...], tolerance: Tolerance) -> Expected | tuple[Expected, ...]:
    """Each reference as :class:`Expected` (a tuple where the call returns several): made once, compared often."""
    if isinstance(reference, tuple):
        return tuple(Expected.of(r, tolerance) for r in reference)
    return Expected.of(reference, tolerance)


class CaseReferences:
    """The prepared reference of the case being measured, for each of its variants in turn.

    A case's variants are measured by several jobs (one per baseline), and preparing its reference takes as long
    as ten comparisons (0.5 s at 32x512x4096 float32, 2 threads: 24 preparations a worker when each job made its
    own), so one instance serves a whole round and prepares each case once. One case at a time: the previous
    case's operands go before the next one's are made, and they go with their case (a weak reference), not
    later: the job that releases a case's buffers releases these too.
    """

    def __init__(self) -> None:
        self._case: weakref.ref | None = None
        self._expected: Expected | tuple[Expected, ...] | None = None

    def of(self, case) -> Expected | tuple[Expected, ...]:
        """``case.reference()`` prepared at ``case.tolerance``."""
        if self._case is None or self._case() is not case:
            self._drop()
            expected = prepare(case.reference(), case.tolerance)
            self._case, self._expected = weakref.ref(case, self._drop), expected
        return self._expected

    def _drop(self, _gone: weakref.ref | None = None) -> None:
        self._case = self._expected = None


def verify(output: object, reference: Tensor | Expected, tolerance: Tolerance, what: str) -> float:
    """Raise VerificationError unless |out - ref| <= atol + rtol * |ref| everywhere; return the max error.

    Every element is compared, a chunk of CHUNK_ELEMENTS at a time: in float32 where the output is narrower
    than float64 and the reference fits float32 (the module's docstring says why that is as strict), else in
    float64. The largest error returned is the comparison's (|out - near| in float32).
    """
    expected = reference if isinstance(reference, Expected) else Expected.of(reference, tolerance)
    out = _flat_values(output)
    if tuple(out.shape) != expected.shape:
        raise VerificationError(f"{what}: output shape {list(out.shape)}, expected {list(expected.shape)}")
    flat_out, flat_ref = out.reshape(-1), expected.reference.reshape(-1)
    narrow = expected.near is not None and flat_out.dtype in _NARROW
    if narrow:
        largest = _largest_within_bound(flat_out, expected)
        if largest is not None:
            return largest
    elif tolerance.atol == tolerance.rtol == 0 and flat_out.dtype == flat_ref.dtype and torch.equal(flat_out, flat_ref):
        return 0.0  # an exact rule (a copy) against its own input: one pass, 0.025 s instead of 0.45 s at 256 MiB
    largest, not_finite, bad, worst, worst_excess = 0.0, 0, 0, -1, -math.inf
    for start in range(0, flat_out.numel(), CHUNK_ELEMENTS):
        chunk = flat_out[start : start + CHUNK_ELEMENTS]
        # NaN where the reference is finite: an element was not written (buffers start as NaN) or overflowed.
        finite = torch.isfinite(chunk)
        if not_finite or not bool(finite.all()):
            not_finite += int((~finite).sum())
            continue
        end = start + chunk.numel()
        if narrow:
            error = torch.sub(
                chunk.to(torch.float32), expected.near[start:end]
            ).abs_()  # a new tensor: never the output
            allowed = expected.bound[start:end]
        else:
            ref = flat_ref[start:end]
            error = chunk.to(torch.float64, copy=True).sub_(ref).abs_()
            allowed = tolerance.bound(ref)
        largest = max(largest, float(error.max()))
        excess = error.sub_(allowed)
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


def _largest_within_bound(flat_out: Tensor, expected: Expected) -> float | None:
    """The largest |out - near| where every element is finite and within its bound; None otherwise.

    Two reductions a chunk and no boolean temporaries: 4x faster than the counting loop of :func:`verify`
    (0.04 s against 0.15 s a 256 MiB output, 2 threads), which runs only where this finds a fault, to say
    where and how many. A NaN or infinite output makes the chunk's largest excess NaN or infinite: a fault.
    """
    largest = 0.0
    for start in range(0, flat_out.numel(), CHUNK_ELEMENTS):
        end = min(start + CHUNK_ELEMENTS, flat_out.numel())
        error = torch.sub(flat_out[start:end].to(torch.float32), expected.near[start:end]).abs_()
        largest = max(largest, float(error.max()))
        excess = float(error.sub_(expected.bound[start:end]).max())
        if not excess <= 0.0:  # NaN compares false: a fault too
            return None
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
