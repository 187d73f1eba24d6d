"""Independent float64 reference and realistic inputs for the op tests."""

from __future__ import annotations

import torch
from torch import Tensor

# Per-dtype tolerances against the float64 reference computed from the SAME
# (already rounded) inputs, so only the kernel's own error counts:
#  - float64: accumulation in double; 1e-12 leaves room for the summation
#    order over 4097 elements (each add errs by <= 2^-53 relative).
#  - float32: accumulation over up to 4097 elements in float with 32
#    independent lanes; observed error is a few ulps (~1e-7 relative), 1e-5
#    is a 100x margin that still catches any wrong formula.
#  - float16 / bfloat16: math in float, one rounding at the store, i.e. at
#    most half an ulp of the output (2^-11 resp. 2^-8 relative); rtol is one
#    full ulp. atol covers outputs that cancel to near zero (bias ~ -x_hat*w).
TOLERANCES: dict[torch.dtype, dict[str, float]] = {
    torch.float64: {"rtol": 1e-12, "atol": 1e-12},
    torch.float32: {"rtol": 1e-5, "atol": 1e-5},
    torch.float16: {"rtol": 2**-10, "atol": 1e-4},
    torch.bfloat16: {"rtol": 2**-7, "atol": 1e-3},
}

FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def reference_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    """y = x * rsqrt(mean(x^2) + eps) * weight + bias, evaluated in float64."""
    x64, w64, b64 = x.double(), weight.double(), bias.double()
    return x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * w64 + b64


def make_inputs(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    generator: torch.Generator,
    requires_grad: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """Activations as a network produces them: per-row scale varies over two
    decades, a few outliers; weights near 1, biases small but non-zero."""
    hidden = shape[-1]
    row_scale = torch.exp(torch.empty(*shape[:-1], 1).uniform_(-2.3, 2.3, generator=generator))
    x = torch.randn(*shape, generator=generator) * row_scale
    if x.numel():
        outliers = torch.rand(*shape, generator=generator) < 0.002
        x = torch.where(outliers, x * 20, x)
    weight = 1.0 + 0.1 * torch.randn(hidden, generator=generator)
    bias = 0.05 * torch.randn(hidden, generator=generator)
    tensors = tuple(t.to(dtype).requires_grad_(requires_grad) for t in (x, weight, bias))
    return tensors  # type: ignore[return-value]
