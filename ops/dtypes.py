"""The dtypes the op supports, with each one's name in every library it passes through.

The kernel core (csrc/core/numeric_types.h) defines the same four; the torch
op, the ONNX schema, ONNX Runtime's bindings, the benchmarks and the plots all
take their lists and maps from here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class DType:
    name: str  # "float32": torch's name without the prefix; the reports' and the CLI's spelling
    torch: torch.dtype
    numpy: np.dtype | None  # None for bfloat16: numpy (ORT's Python feed type) has none
    onnx: int  # onnx.TensorProto element type
    ort: str  # the type name ORT's NodeArg.type and the schema's type constraint use
    itemsize: int  # bytes per element


DTYPES: tuple[DType, ...] = (
    DType("float32", torch.float32, np.dtype(np.float32), 1, "tensor(float)", 4),  # TensorProto.FLOAT
    DType("float64", torch.float64, np.dtype(np.float64), 11, "tensor(double)", 8),  # TensorProto.DOUBLE
    DType("float16", torch.float16, np.dtype(np.float16), 10, "tensor(float16)", 2),  # TensorProto.FLOAT16
    DType("bfloat16", torch.bfloat16, None, 16, "tensor(bfloat16)", 2),  # TensorProto.BFLOAT16
)
TORCH_DTYPES: tuple[torch.dtype, ...] = tuple(d.torch for d in DTYPES)
NAMES: tuple[str, ...] = tuple(d.name for d in DTYPES)
BY_NAME: dict[str, DType] = {d.name: d for d in DTYPES}
BY_TORCH: dict[torch.dtype, DType] = {d.torch: d for d in DTYPES}
BY_ORT: dict[str, DType] = {d.ort: d for d in DTYPES}


def dtype_name(dtype: torch.dtype) -> str:
    """ "float32" for torch.float32 (any torch dtype, supported or not)."""
    return str(dtype).removeprefix("torch.")


def parse_dtypes(spec: str, option: str = "--dtype", allowed: tuple[str, ...] = NAMES) -> list[DType]:
    """ "float32" or a comma list of names in ``allowed``; ValueError naming ``option`` on anything else."""
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in allowed]
    if unknown or not names:
        raise ValueError(f"{option} must be a comma list of {', '.join(allowed)}, got {spec!r}")
    return [BY_NAME[n] for n in names]
