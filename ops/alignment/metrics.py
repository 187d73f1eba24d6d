"""How far apart two outputs are, against a :class:`ops.reference.Tolerance`.

The tolerances themselves (ALIGNMENT_TOLERANCES, MODEL_ALIGNMENT_TOLERANCE)
are in ops/reference.py beside the others. A case passes only if all elements
are finite, each is within ``atol + rtol * |torch|`` of PyTorch's, and the
cosine similarity reaches the tolerance's floor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ops.reference import Tolerance


@dataclass(frozen=True)
class Comparison:
    max_abs: float
    max_rel: float
    cosine: float
    finite: bool
    within: bool  # every element within atol + rtol * |reference|
    passed: bool


def compare(actual: np.ndarray, reference: np.ndarray, tol: Tolerance) -> Comparison:
    """Compare ``actual`` (ORT) with ``reference`` (PyTorch) in float64."""
    if actual.shape != reference.shape:
        raise ValueError(f"shapes differ: actual {actual.shape}, reference {reference.shape}")
    a = np.asarray(actual, dtype=np.float64).ravel()
    r = np.asarray(reference, dtype=np.float64).ravel()
    finite = bool(np.isfinite(a).all() and np.isfinite(r).all())
    if not finite:
        return Comparison(float("nan"), float("nan"), float("nan"), False, False, False)
    diff = np.abs(a - r)
    # Relative error where it means something: below |ref| = atol / rtol the
    # absolute tolerance dominates, and dividing by a near-zero reference
    # would report noise as a huge relative error.
    floor = tol.atol / tol.rtol if tol.rtol > 0 else tol.atol
    significant = np.abs(r) >= floor
    max_rel = float((diff[significant] / np.abs(r[significant])).max()) if significant.any() else 0.0
    norms = np.linalg.norm(a) * np.linalg.norm(r)
    cosine = float(a @ r / norms) if norms > 0 else float(np.array_equal(a, r))
    within = bool((diff <= tol.bound(r)).all())
    return Comparison(
        max_abs=float(diff.max()) if diff.size else 0.0,
        max_rel=max_rel,
        cosine=cosine,
        finite=True,
        within=within,
        passed=within and (tol.min_cosine is None or cosine >= tol.min_cosine),
    )
