"""Python side of the myops norms (fused_norm, fused_add_norm): typed entry points, fake kernels.

The schema and the CPU/CUDA kernels are registered in C++ (csrc/torch). This
module adds the fake kernels, so FakeTensor tracing (torch.compile,
torch.export, the ONNX exporter) knows output shapes without running the
kernel. Autograd is a C++ kernel (csrc/torch/torch_autograd.cpp): a Python
autograd kernel would cost more per call than the fused op itself.
The C++ schema points at this module (set_python_module), so torch tells a
user who forgot to import it where the fake kernels live.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ops.dtypes import NAMES, TORCH_DTYPES
from ops.reference import EPS


def fused_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = EPS) -> Tensor:
    """RMS-normalise the last dim of ``x``, then scale by ``weight`` and shift by ``bias``."""
    return torch.ops.myops.fused_norm.default(x, weight, bias, eps)


def fused_norm_out(x: Tensor, weight: Tensor, bias: Tensor, eps: float, out: Tensor) -> Tensor:
    """Like :func:`fused_norm`, but writes into the caller's contiguous ``out`` and returns it."""
    torch.ops.myops.fused_norm_out.default(x, weight, bias, eps, out)
    return out


def fused_add_norm(
    x: Tensor, residual: Tensor, weight: Tensor, bias: Tensor, eps: float = EPS
) -> tuple[Tensor, Tensor]:
    """``s = x + residual``, then :func:`fused_norm` of ``s``, in one pass: returns ``(norm(s), s)``.

    ``s`` is rounded to the dtype as ``x + residual`` is, and the norm is that
    of the rounded ``s``: the result equals ``fused_norm(x + residual)`` bit for bit.
    """
    return torch.ops.myops.fused_add_norm.default(x, residual, weight, bias, eps)


def fused_add_norm_inplace(
    x: Tensor, residual: Tensor, weight: Tensor, bias: Tensor, eps: float = EPS
) -> tuple[Tensor, Tensor]:
    """:func:`fused_add_norm` without allocating: ``x`` receives the norm and ``residual`` the sum; returns both.

    Both must be contiguous and must not share memory. No backward (it
    overwrites its inputs): use :func:`fused_add_norm` for training.
    """
    torch.ops.myops.fused_add_norm_inplace.default(x, residual, weight, bias, eps)
    return x, residual


# --- fake kernels -------------------------------------------------------------
# Same checks and messages as csrc/torch/torch_adapter.cpp, written with
# torch._check_* so they also hold for symbolic sizes during tracing.


def _check_args(op: str, x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> None:
    torch._check_value(
        x.dim() >= 1, lambda: f"{op}: x must have at least 1 dimension (the normalised last one), got a 0-dim tensor"
    )
    torch._check_type(
        x.dtype in TORCH_DTYPES, lambda: f"{op}: x must be {', '.join(NAMES[:-1])} or {NAMES[-1]}, got {x.dtype}"
    )
    for name, param in (("weight", weight), ("bias", bias)):
        torch._check_value(
            param.dim() == 1 and param.shape[0] == x.shape[-1],
            lambda name=name, param=param: (
                f"{op}: {name} must be a 1-D tensor of length x.size(-1) = {x.shape[-1]}, got shape {list(param.shape)}"
            ),
        )
        torch._check_type(
            param.dtype == x.dtype,
            lambda name=name, param=param: f"{op}: {name} must have the dtype of x ({x.dtype}), got {param.dtype}",
        )
        torch._check(
            param.device == x.device,
            lambda name=name, param=param: f"{op}: {name} must be on the device of x ({x.device}), got {param.device}",
        )
    torch._check_value(eps >= 0.0 and eps != float("inf"), lambda: f"{op}: eps must be a finite number >= 0, got {eps}")


@torch.library.register_fake("myops::fused_norm")
def _fused_norm_fake(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    _check_args("fused_norm", x, weight, bias, eps)
    # The real kernel returns a fresh contiguous tensor whatever x's strides.
    return x.new_empty(x.shape)


def _check_residual(op: str, x: Tensor, residual: Tensor) -> None:
    torch._check_value(
        residual.shape == x.shape,
        lambda: f"{op}: residual must have the shape of x {list(x.shape)}, got {list(residual.shape)}",
    )
    torch._check_type(
        residual.dtype == x.dtype, lambda: f"{op}: residual must have the dtype of x ({x.dtype}), got {residual.dtype}"
    )
    torch._check(
        residual.device == x.device,
        lambda: f"{op}: residual must be on the device of x ({x.device}), got {residual.device}",
    )


@torch.library.register_fake("myops::fused_add_norm")
def _fused_add_norm_fake(
    x: Tensor, residual: Tensor, weight: Tensor, bias: Tensor, eps: float
) -> tuple[Tensor, Tensor]:
    _check_args("fused_add_norm", x, weight, bias, eps)
    _check_residual("fused_add_norm", x, residual)
    # Both outputs are fresh contiguous tensors, whatever the inputs' strides.
    return x.new_empty(x.shape), x.new_empty(x.shape)


@torch.library.register_fake("myops::fused_add_norm_inplace")
def _fused_add_norm_inplace_fake(x: Tensor, residual: Tensor, weight: Tensor, bias: Tensor, eps: float) -> None:
    _check_args("fused_add_norm_inplace", x, weight, bias, eps)
    _check_residual("fused_add_norm_inplace", x, residual)


@torch.library.register_fake("myops::fused_norm_out")
def _fused_norm_out_fake(x: Tensor, weight: Tensor, bias: Tensor, eps: float, out: Tensor) -> None:
    _check_args("fused_norm_out", x, weight, bias, eps)
    torch._check_value(
        out.shape == x.shape,
        lambda: f"fused_norm_out: out must have the shape of x {list(x.shape)}, got {list(out.shape)}",
    )
    torch._check_type(
        out.dtype == x.dtype, lambda: f"fused_norm_out: out must have the dtype of x ({x.dtype}), got {out.dtype}"
    )
