"""The one float64 reference of the norm, its realistic inputs and the tolerances against it.

Tests, the benchmark's pre-timing check, the ONNX alignment and the GPU driver
all take these from here, so "correct" means the same thing everywhere.

  * :func:`reference_norm` - ``x * rsqrt(mean(x^2, -1) + eps) * weight + bias``
    evaluated in float64 from the given (already rounded) inputs, on their device;
  * :func:`make_inputs` - x, weight, bias drawn as a trained network would show
    them (see :data:`DISTRIBUTIONS`), for any shape, dtype and device, from a
    seed or a generator;
  * :data:`TOLERANCES` - how far the fused kernel may be from the reference,
    per dtype, and :data:`COMPOSITION_TOLERANCES` - how far any implementation
    that rounds between its steps (the unfused composition, ``F.rms_norm``,
    Inductor, ONNX Runtime) may be. Each number carries its reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

FLOAT_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
EPS = 1e-6


def reference_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    """y = x * rsqrt(mean(x^2) + eps) * weight + bias over the last dim, evaluated in float64.

    Tensors in, a float64 tensor out on their device; numpy arrays in (as ONNX
    Runtime takes and returns them), a float64 array out.
    """
    arrays = all(isinstance(t, np.ndarray) for t in (x, weight, bias))
    x64, w64, b64 = (torch.as_tensor(t).detach().to(torch.float64) for t in (x, weight, bias))
    y = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * w64 + b64
    return y.numpy() if arrays else y


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


def activations(shape: tuple[int, ...], dtype: torch.dtype = torch.float32, generator: torch.Generator | None = None,
                seed: int = 0, device: str | torch.device = "cpu", distribution: str = "rows") -> Tensor:
    """x alone, drawn by ``distribution`` (see :data:`DISTRIBUTIONS`)."""
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {sorted(DISTRIBUTIONS)}, got {distribution!r}")
    g = generator if generator is not None else make_generator(seed)
    # Drawn on the CPU, then moved: the same seed gives the same values on every device.
    return DISTRIBUTIONS[distribution](tuple(shape), g).to(device=device, dtype=dtype)


def make_inputs(shape: tuple[int, ...], dtype: torch.dtype = torch.float32, generator: torch.Generator | None = None,
                seed: int = 0, device: str | torch.device = "cpu", distribution: str = "rows",
                requires_grad: bool = False) -> tuple[Tensor, Tensor, Tensor]:
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
    """|actual - reference| <= atol + rtol * |reference| elementwise (torch.testing.assert_close's rule)."""

    rtol: float
    atol: float
    why: str

    def as_kwargs(self) -> dict[str, float]:
        return {"rtol": self.rtol, "atol": self.atol}


# The fused kernel, against the float64 reference of the SAME rounded inputs, so
# only the kernel's own error counts. atol covers outputs that cancel to near
# zero (bias ~ -x_hat * w), where the error is an ulp of the O(1) terms.
TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float64: Tolerance(1e-12, 1e-12, "double accumulation; 1e-12 leaves room for the summation order over "
                             "4097 squares (each add errs by <= 2^-53 relative)"),
    torch.float32: Tolerance(1e-5, 2e-5, "float accumulation in 32 lanes gives a few ulp (~1e-7 relative); 1e-5 is a "
                             "100x margin that still catches any wrong formula; atol for cancelled outputs up to ~40"),
    torch.float16: Tolerance(2**-10, 1e-4, "math in float, one rounding at the store: at most half an ulp (2^-11); "
                             "rtol is one full ulp"),
    torch.bfloat16: Tolerance(2**-7, 1e-3, "math in float, one rounding at the store: at most half an ulp (2^-8); "
                              "rtol is one full ulp"),
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


def tolerance(dtype: torch.dtype, composition: bool = False) -> Tolerance:
    table = COMPOSITION_TOLERANCES if composition else TOLERANCES
    if dtype not in table:
        raise ValueError(f"dtype must be one of {[str(d) for d in table]}, got {dtype}")
    return table[dtype]
