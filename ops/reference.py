"""The one float64 reference of the norm, its realistic inputs and the tolerances against it.

Tests, the benchmark's pre-timing check, the serving benchmark's response
check, the debug-dump replay and the ONNX alignment all take their tolerances
from here, so "correct" means the same thing everywhere.

  * :func:`reference_norm` - ``x * rsqrt(mean(x^2, -1) + eps) * weight + bias``
    evaluated in float64 from the given (already rounded) inputs, on their device;
    :func:`reference_add_norm` - the same norm of ``x + residual``, and that sum;
  * :func:`make_inputs` - x, weight, bias drawn as a trained network would show
    them (see :data:`DISTRIBUTIONS`), for any shape, dtype and device, from a
    seed or a generator;
  * :class:`Tolerance` and its tables, each number with its reason:
    :data:`TOLERANCES` - how far the fused kernel may be from the reference;
    :data:`COMPOSITION_TOLERANCES` - how far any implementation that rounds
    between its steps (the unfused composition, ``F.rms_norm``, Inductor,
    ONNX Runtime) may be, and :func:`model_tolerance` for the whole model;
    :data:`ALIGNMENT_TOLERANCES` and :data:`MODEL_ALIGNMENT_TOLERANCE` - how
    far ONNX Runtime's output may be from PyTorch's for the same input.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

EPS = 1e-6  # the op's, the norms' and the model's default epsilon


# Elements of x a chunk of rows holds while the reference is made: its float64 temporaries stay in the caches,
# where whole-tensor ones are fresh memory (about 2 GB/s to fault in on these VMs: at 32x512x4096 the residual
# add + norm's five whole-tensor temporaries took 1.2-5 s, its chunks 0.3-0.4 s).
REFERENCE_CHUNK_ELEMENTS = 1 << 18


def reference_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    """y = x * rsqrt(mean(x^2) + eps) * weight + bias over the last dim, evaluated in float64.

    Tensors in, a float64 tensor out on their device; numpy arrays in (as ONNX
    Runtime takes and returns them), a float64 array out.
    """
    arrays = all(isinstance(t, np.ndarray) for t in (x, weight, bias))
    x, weight, bias = (torch.as_tensor(t).detach() for t in (x, weight, bias))
    w64, b64 = weight.to(torch.float64), bias.to(torch.float64)
    if not _by_rows(x, w64, b64):
        y = _norm_rows(x.to(torch.float64), w64, b64, eps)
    else:
        y = torch.empty(x.shape, dtype=torch.float64, device=x.device)
        for rows, out in _row_chunks(x, y):
            _norm_rows(rows.to(torch.float64), w64, b64, eps, out=out)
    return y.numpy() if arrays else y


def reference_add_norm(x: Tensor, residual: Tensor, weight: Tensor, bias: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """``(y, s)`` of the fused residual add + norm, in float64.

    ``s = x + residual`` is summed in float64 and rounded once to x's dtype,
    as the op stores it; ``y`` is :func:`reference_norm` of that stored ``s``,
    so comparing the op's ``y`` against it measures the kernel's own error.
    """
    x, residual, weight, bias = (torch.as_tensor(t).detach() for t in (x, residual, weight, bias))
    w64, b64 = weight.to(torch.float64), bias.to(torch.float64)

    def stored_sum(x_part: Tensor, residual_part: Tensor) -> Tensor:
        # float64 + any narrower: exact operands, one rounding to x's dtype
        return x_part.to(torch.float64, copy=True).add_(residual_part).to(x.dtype)

    if not _by_rows(x, w64, b64) or residual.shape != x.shape:
        stored = stored_sum(x, residual)
        return _norm_rows(stored.to(torch.float64), w64, b64, eps), stored.double()
    y = torch.empty(x.shape, dtype=torch.float64, device=x.device)
    s = torch.empty(x.shape, dtype=torch.float64, device=x.device)
    for (x_rows, y_rows), (residual_rows, s_rows) in zip(_row_chunks(x, y), _row_chunks(residual, s), strict=True):
        s_rows.copy_(stored_sum(x_rows, residual_rows))
        _norm_rows(s_rows, w64, b64, eps, out=y_rows)
    return y, s


def _norm_rows(x64: Tensor, w64: Tensor, b64: Tensor, eps: float, out: Tensor | None = None) -> Tensor:
    """The norm of float64 rows, x64 left as it is; into ``out`` (x64's shape) where given, else a new tensor."""
    if not x64.dim():
        mean_square = x64 * x64
    else:
        # The mean of squares is a dot product of each row with itself; torch sums it in float64 as pow + mean
        # does, with another order of additions: a few float64 ulps apart, 1e-9 of the narrowest tolerance.
        mean_square = torch.linalg.vecdot(x64, x64, dim=-1).unsqueeze(-1).div_(x64.shape[-1])
    scale = mean_square.add_(eps).rsqrt_()
    y = torch.mul(x64, scale) if out is None else torch.mul(x64, scale, out=out)
    return y.mul_(w64).add_(b64)


def _by_rows(x: Tensor, w64: Tensor, b64: Tensor) -> bool:
    """Whether the reference can be made a chunk of rows at a time: x has rows and something in them, and weight
    and bias broadcast along the last dim only (the op's [hidden]; a test may pass full-shaped ones)."""
    return (
        x.dim() >= 1 and x.numel() > REFERENCE_CHUNK_ELEMENTS and x.shape[-1] > 0 and w64.dim() <= 1 and b64.dim() <= 1
    )


def _row_chunks(x: Tensor, out: Tensor):
    """(rows of x, the same rows of ``out``), about REFERENCE_CHUNK_ELEMENTS elements each; out is contiguous."""
    hidden = x.shape[-1]
    rows_in, rows_out = x.reshape(-1, hidden), out.view(-1, hidden)
    step = max(1, REFERENCE_CHUNK_ELEMENTS // hidden)
    for start in range(0, rows_in.shape[0], step):
        yield rows_in[start : start + step], rows_out[start : start + step]


# --- inputs ----------------------------------------------------------------------------------


def _rows(shape: tuple[int, ...], g: torch.Generator) -> Tensor:
    row_scale = torch.exp(torch.empty(*shape[:-1], 1).uniform_(-2.3, 2.3, generator=g))
    x = torch.randn(*shape, generator=g) * row_scale
    if x.numel():
        x = torch.where(torch.rand(*shape, generator=g) < 0.002, x * 20, x)
    return x


def _features(shape: tuple[int, ...], g: torch.Generator) -> Tensor:
    hidden = shape[-1]
    offset = torch.randn(hidden, generator=g) * 0.5
    scale = torch.rand(hidden, generator=g) * 1.5 + 0.5
    scale = torch.where(torch.rand(hidden, generator=g) < 1 / 64, scale * 20, scale)
    return torch.randn(*shape, generator=g) * scale + offset


# Two ways activations reach a norm in a trained network. Neither is centred
# or unit-variance, and both carry outliers an order of magnitude out, which an
# RMS norm (no mean subtraction) must cope with.
DISTRIBUTIONS = {
    # per-row scale over two decades (tokens of very different magnitude), 1 in 500 elements x20
    "rows": _rows,
    # the residual stream: a per-feature offset and scale, about 1 feature in 64 scaled x20
    "features": _features,
}


def make_generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def activations(
    shape: tuple[int, ...],
    dtype: torch.dtype = torch.float32,
    generator: torch.Generator | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    distribution: str = "rows",
) -> Tensor:
    """x alone, drawn by ``distribution`` (see :data:`DISTRIBUTIONS`)."""
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {sorted(DISTRIBUTIONS)}, got {distribution!r}")
    g = generator if generator is not None else make_generator(seed)
    # Drawn on the CPU, then moved: the same seed gives the same values on every device.
    return DISTRIBUTIONS[distribution](tuple(shape), g).to(device=device, dtype=dtype)


def make_inputs(
    shape: tuple[int, ...],
    dtype: torch.dtype = torch.float32,
    generator: torch.Generator | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    distribution: str = "rows",
    requires_grad: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """x [*shape], weight and bias [shape[-1]]: weights near 1 and biases small but non-zero, as after training.

    weight and bias are drawn first, so they depend on the hidden size and the
    seed only (the benchmark exports one ONNX file per hidden size).
    """
    if len(shape) < 1:
        raise ValueError(f"shape must have at least one dim (the normalised one), got {tuple(shape)}")
    g = generator if generator is not None else make_generator(seed)
    hidden = shape[-1]
    weight = 1.0 + 0.1 * torch.randn(hidden, generator=g)
    bias = 0.05 * torch.randn(hidden, generator=g)
    x = activations(shape, torch.float32, g, distribution=distribution)
    return tuple(t.to(device=device, dtype=dtype).requires_grad_(requires_grad) for t in (x, weight, bias))  # type: ignore[return-value]


# --- tolerances ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tolerance:
    """|actual - reference| <= atol + rtol * |reference| elementwise (torch.testing.assert_close's rule), and
    where ``min_cosine`` is set, a cosine similarity of at least ``min_cosine`` between the two."""

    rtol: float
    atol: float
    why: str
    min_cosine: float | None = None

    def as_kwargs(self) -> dict[str, float]:
        return {"rtol": self.rtol, "atol": self.atol}

    def bound(self, reference):
        """The largest allowed |actual - reference| of each element (of a tensor or a numpy array)."""
        return self.atol + self.rtol * abs(reference)

    def scaled(self, factor: float, why: str) -> Tolerance:
        return Tolerance(self.rtol * factor, self.atol * factor, why, self.min_cosine)


# The fused kernel, against the float64 reference of the SAME rounded inputs, so
# only the kernel's own error counts. atol covers outputs that cancel to near
# zero (bias ~ -x_hat * w), where the error is an ulp of the O(1) terms.
TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float64: Tolerance(
        1e-12,
        1e-12,
        "double accumulation; 1e-12 leaves room for the summation order over "
        "4097 squares (each add errs by <= 2^-53 relative)",
    ),
    torch.float32: Tolerance(
        1e-5,
        2e-5,
        "float accumulation in 32 lanes gives a few ulp (~1e-7 relative); 1e-5 is a "
        "100x margin that still catches any wrong formula; atol for cancelled outputs up to ~40",
    ),
    torch.float16: Tolerance(
        2**-10, 1e-4, "math in float, one rounding at the store: at most half an ulp (2^-11); rtol is one full ulp"
    ),
    torch.bfloat16: Tolerance(
        2**-7, 1e-3, "math in float, one rounding at the store: at most half an ulp (2^-8); rtol is one full ulp"
    ),
}

# Any implementation that rounds to the dtype between its steps (pow, mean,
# rsqrt, two muls, add: up to six roundings), or sums in another order over up
# to 8192 elements (Inductor, cuBLAS-free reductions, ORT's fused node). Outputs
# are O(1), so a few ulp of the dtype each step: fp32 1.2e-7, fp16 9.8e-4,
# bf16 7.8e-3 per ulp. The bounds leave ~100x headroom for fp32 yet stay far
# below the O(0.1) error of wrong math (a missing bias, a wrong eps, mean
# instead of mean square). The benchmark checks every baseline with these.
COMPOSITION_TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float64: Tolerance(1e-9, 1e-9, "double throughout; only the order of summation differs"),
    torch.float32: Tolerance(1e-4, 1e-4, "a few float ulp per step over six steps, ~100x headroom"),
    torch.float16: Tolerance(1e-2, 1e-2, "up to six half roundings of ~1e-3 each, plus margin"),
    torch.bfloat16: Tolerance(5e-2, 5e-2, "up to six bfloat16 roundings of ~8e-3 each, plus margin"),
}


# The whole model, against its float64 copy: two blocks of matmuls on top of
# the norms, each rounding its K-long sums, give 10x the norm's composition error.
_MODEL_FACTOR = 10.0


def model_tolerance(dtype: torch.dtype) -> Tolerance:
    """The sequence model's output in ``dtype`` against the float64 model (benchmarks, serving)."""
    return tolerance(dtype, composition=True).scaled(_MODEL_FACTOR, "two blocks of matmuls on top of the norms")


def tolerance(dtype: torch.dtype, composition: bool = False) -> Tolerance:
    table = COMPOSITION_TOLERANCES if composition else TOLERANCES
    if dtype not in table:
        raise ValueError(f"dtype must be one of {[str(d) for d in table]}, got {dtype}")
    return table[dtype]


# --- alignment: ONNX Runtime against PyTorch --------------------------------------------------
# Pairs of outputs for the same input, one from each runtime, neither of them
# the float64 reference; the cosine floor catches a systematic shift that
# stays inside the elementwise bound.

# Op alone: PyTorch runs the fused kernel, ORT runs either the same kernel
# core (custom), its fused SimplifiedLayerNormalization (standard) or its
# RMSNormalization (opset23). All accumulate the mean square in float (double
# for float64), so the outputs differ only by summation order in the mean of
# up to ~4K squares (relative error ~sqrt(H) ulp, halved by the square root),
# by sqrt-then-divide versus rsqrt-then-multiply, and by where the weight and
# bias roundings happen: a few ulp of the output.
ALIGNMENT_TOLERANCES: dict[torch.dtype, Tolerance] = {
    # float32 ulp is 1.2e-7 relative: 1e-5 allows ~80 ulp; the standard and
    # opset23 routes reach 4.4e-7 (~4 ulp) at H=4097, the custom route (same
    # kernel core) is bit-identical. atol covers outputs near 0
    # (bias-dominated elements), where the error is an ulp of the O(1) terms
    # that cancelled.
    torch.float32: Tolerance(1e-5, 1e-5, "a few float32 ulp", min_cosine=1 - 1e-9),
    # float16 ulp is 9.8e-4 relative. RMSNormalization + Add rounds to float16
    # after the normalisation and again after the bias (the fused kernel
    # rounds once): 1 ulp seen (9.8e-4 relative), and 2 ulp is possible; 4e-3
    # allows 4. atol: one ulp at |y| in [2, 4) is 3.9e-3.
    torch.float16: Tolerance(4e-3, 4e-3, "2-4 float16 ulp", min_cosine=1 - 1e-5),
    # float64: same math in double; 1e-12 is ~4500 ulp, far above order effects,
    # far below any single-precision shortcut (which shows at ~1e-7).
    torch.float64: Tolerance(1e-12, 1e-12, "double math throughout", min_cosine=1 - 1e-15),
}

# Whole model (float32): besides the norms, the matmuls run in different
# libraries (ORT's MLAS, torch's oneDNN/MKL) with different blockings over
# K = 128..512, and softmax, exp and GELU's erf have different
# implementations. They reach 4e-6 absolute and 2e-6 relative per block
# output (d_model 128, two blocks); 1e-4 leaves 25-50x headroom for other
# CPUs' code paths (AVX2 vs AVX-512 kernels in MLAS and oneDNN), while a
# dropped bias, a swapped weight or a wrong axis moves outputs by 1e-2 or
# more. An eps off by 10x moves them by only ~(eps' - eps) / (2 mean square),
# ~5e-6 here, below any float32 model tolerance: that is why the post-export
# checks compare eps exactly (ops/onnx/checks.py), and why float64 cases
# exist (their tolerance sees it).
MODEL_ALIGNMENT_TOLERANCE = Tolerance(1e-4, 1e-4, "float32, different GEMM/softmax libraries", min_cosine=1 - 1e-8)


@dataclass(frozen=True)
class ReferenceTolerances:
    """Named bounds for checks that are not the op's own kernel against the float64 reference (the tests name
    these instead of writing rtol/atol pairs): each says which computation it allows for, and why."""

    exact: Tolerance
    fp64: Tolerance
    fp64_grad: Tolerance
    fp64_model: Tolerance
    fp32: Tolerance
    fp32_model: Tolerance
    fp32_served: Tolerance


REFERENCE = ReferenceTolerances(
    exact=Tolerance(0.0, 0.0, "the same operations in the same order: equal bit for bit"),
    fp64=Tolerance(1e-12, 1e-12, "float64 against float64: the rounding of a row's sums, far below any real bug"),
    fp64_grad=Tolerance(1e-10, 1e-12, "float64 gradients: the backward sums over rows and columns in its own order"),
    fp64_model=Tolerance(1e-10, 1e-10, "a float64 model or its gradients: several layers' roundings add up"),
    fp32=Tolerance(1e-5, 1e-5, "one float32 norm (exported or run by ONNX Runtime) against float64: a few ulps"),
    fp32_model=Tolerance(2e-5, 2e-5, "a float32 model against float64: each layer's float32 rounding adds up"),
    fp32_served=Tolerance(
        1e-3, 1e-3, "the float32 model served by ONNX Runtime against torch in float64: other GEMM and softmax code"
    ),
)
