"""The interchangeable implementations of the norm, and a module that uses one.

All compute ``x * rsqrt(mean(x^2, -1) + eps) * weight + bias`` over the last dim:
  * ``unfused``: the Python composition the fused op replaces (pow, mean, add,
    rsqrt, mul, mul, add: seven kernels);
  * ``native``: torch's ``F.rms_norm`` plus the bias add (what a user would pick
    instead; on CPU torch 2.13 runs it as a composite, on CUDA as a fused kernel);
  * ``fused``: the custom op ``torch.ops.myops.fused_norm``;
  * ``fused_add``: the same op, and where a residual add feeds the norm, the
    fused residual add + norm ``torch.ops.myops.fused_add_norm`` instead of a
    separate add (every other impl adds first, then normalises).
The model, the ONNX export routes and the benchmarks all take their norm from
here, so every consumer compares the same math.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ops.reference import EPS

NormFn = Callable[[Tensor, Tensor, Tensor, float], Tensor]
# (x, residual, weight, bias, eps) -> (norm(x + residual), x + residual)
AddNormFn = Callable[[Tensor, Tensor, Tensor, Tensor, float], tuple[Tensor, Tensor]]


def unfused_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    """The framework-op composition: seven small kernels, six intermediates."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight + bias


def native_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    """torch's own RMS norm (no bias input) followed by the bias add."""
    return F.rms_norm(x, (x.shape[-1],), weight, eps) + bias


def fused_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    """The custom op (requires ``import ops``, which loads the library)."""
    return torch.ops.myops.fused_norm.default(x, weight, bias, eps)


def fused_add_norm(x: Tensor, residual: Tensor, weight: Tensor, bias: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """The fused residual add + norm op (requires ``import ops``): ``(norm(x + residual), x + residual)``."""
    return torch.ops.myops.fused_add_norm.default(x, residual, weight, bias, eps)


def add_then(norm: NormFn) -> AddNormFn:
    """The residual add as its own op, then ``norm``: what a model without the fused add+norm runs."""

    def add_norm(x: Tensor, residual: Tensor, weight: Tensor, bias: Tensor, eps: float) -> tuple[Tensor, Tensor]:
        s = x + residual
        return norm(s, weight, bias, eps), s

    add_norm.__name__ = f"add_then_{norm.__name__}"
    return add_norm


NORM_IMPLEMENTATIONS: dict[str, NormFn] = {
    "unfused": unfused_norm,
    "native": native_norm,
    "fused": fused_norm,
    "fused_add": fused_norm,
}
ADD_NORM_IMPLEMENTATIONS: dict[str, AddNormFn] = {
    "unfused": add_then(unfused_norm),
    "native": add_then(native_norm),
    "fused": add_then(fused_norm),
    "fused_add": fused_add_norm,
}


def norm_function(name: str) -> NormFn:
    try:
        return NORM_IMPLEMENTATIONS[name]
    except KeyError:
        raise ValueError(f"norm implementation must be one of {sorted(NORM_IMPLEMENTATIONS)}, got {name!r}") from None


def add_norm_function(name: str) -> AddNormFn:
    norm_function(name)  # the same names, the same error
    return ADD_NORM_IMPLEMENTATIONS[name]


class Norm(nn.Module):
    """RMS norm with weight and bias over the last dim, computed by a chosen implementation."""

    def __init__(self, hidden: int, impl: str = "fused", eps: float = EPS):
        super().__init__()
        self.impl = impl
        self.eps = eps
        self._fn = norm_function(impl)
        self._add_fn = add_norm_function(impl)
        self.weight = nn.Parameter(torch.ones(hidden))
        self.bias = nn.Parameter(torch.zeros(hidden))

    def forward(self, x: Tensor, residual: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
        """The norm of ``x``; with ``residual``, ``(norm(x + residual), x + residual)``.

        The residual form runs as one op for impl ``fused_add``, as an add and
        the norm otherwise. Both go through the module call, so exporters
        record the add under this norm's module path.
        """
        if residual is None:
            return self._fn(x, self.weight, self.bias, self.eps)
        return self._add_fn(x, residual, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, impl={self.impl!r}, eps={self.eps}"
