"""How far apart two outputs are, and how far apart they may be (per dtype and level).

Every tolerance is a pair (atol, rtol) used as ``|ort - torch| <= atol + rtol * |torch|``
elementwise, plus a floor on cosine similarity; a case passes only if all
elements are finite and both hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    min_cosine: float
    why: str


# Op alone: PyTorch runs the fused kernel, ORT runs either the same kernel
# core (custom), its fused SimplifiedLayerNormalization (standard) or its
# RMSNormalization (opset23). All accumulate the mean square in float (double
# for float64), so the outputs differ only by summation order in the mean of
# up to ~4K squares (relative error ~sqrt(H) ulp, halved by the square root),
# by sqrt-then-divide versus rsqrt-then-multiply, and by where the weight and
# bias roundings happen: a few ulp of the output.
OP_TOLERANCES: dict[str, Tolerance] = {
    # float32 ulp is 1.2e-7 relative: 1e-5 allows ~80 ulp; the standard and
    # opset23 routes reach 4.4e-7 (~4 ulp) at H=4097, the custom route (same
    # kernel core) is bit-identical. atol covers outputs near 0
    # (bias-dominated elements), where the error is an ulp of the O(1) terms
    # that cancelled.
    "float32": Tolerance(atol=1e-5, rtol=1e-5, min_cosine=1 - 1e-9, why="a few float32 ulp"),
    # float16 ulp is 9.8e-4 relative. RMSNormalization + Add rounds to float16
    # after the normalisation and again after the bias (the fused kernel
    # rounds once): 1 ulp seen (9.8e-4 relative), and 2 ulp is possible; 4e-3
    # allows 4. atol: one ulp at |y| in [2, 4) is 3.9e-3.
    "float16": Tolerance(atol=4e-3, rtol=4e-3, min_cosine=1 - 1e-5, why="2-4 float16 ulp"),
    # float64: same math in double; 1e-12 is ~4500 ulp, far above order effects,
    # far below any single-precision shortcut (which shows at ~1e-7).
    "float64": Tolerance(atol=1e-12, rtol=1e-12, min_cosine=1 - 1e-15, why="double math throughout"),
}

# Whole model (float32): besides the norms, the matmuls run in different
# libraries (ORT's MLAS, torch's oneDNN/MKL) with different blockings over
# K = 128..512, and softmax, exp and GELU's erf have different
# implementations. Here they reach 4e-6 absolute and 2e-6 relative per block
# output (d_model 128, two blocks); 1e-4 leaves 25-50x headroom for other
# CPUs' code paths (AVX2 vs AVX-512 kernels in MLAS and oneDNN), while a
# dropped bias, a swapped weight or a wrong axis moves outputs by 1e-2 or
# more. An eps off by 10x moves them by only ~(eps' - eps) / (2 mean square),
# ~5e-6 here, below any float32 model tolerance: that is why the post-export
# checks compare eps exactly (ops/onnx/checks.py), and why float64 cases
# exist (their tolerance sees it).
MODEL_TOLERANCE = Tolerance(atol=1e-4, rtol=1e-4, min_cosine=1 - 1e-8, why="float32, different GEMM/softmax libraries")


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
    within = bool((diff <= tol.atol + tol.rtol * np.abs(r)).all())
    return Comparison(
        max_abs=float(diff.max()) if diff.size else 0.0,
        max_rel=max_rel,
        cosine=cosine,
        finite=True,
        within=within,
        passed=within and cosine >= tol.min_cosine,
    )
