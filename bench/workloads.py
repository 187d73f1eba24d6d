"""What is benchmarked: op-level cases over a grid of shapes, model-level cases.

Op-level shapes span the three regimes of a norm on a CPU:
  * dispatch-bound  1x8x512     (16 KiB: the Python/dispatcher cost of each call dominates);
  * cache-resident  8x128x1024  (4 MiB: fits the 32 MiB L3, compute and L3 bandwidth count);
  * memory-bound    32x512x4096 (256 MiB: DRAM bandwidth, and page faults for fresh outputs);
plus two in between for the plot. Model-level cases run the sequence model of
ops/model.py (its default size) at a small and a medium batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from ops.model import SequenceModel, build_model, example_input

OP_SHAPES_FULL: tuple[tuple[int, int, int], ...] = (
    (1, 8, 512),
    (4, 64, 768),
    (8, 128, 1024),
    (16, 256, 2048),
    (32, 512, 4096),
)
OP_SHAPES_QUICK: tuple[tuple[int, int, int], ...] = ((1, 8, 512), (8, 128, 1024))

# (label, batch, seq) for the model's default size (d_model 128, 2 layers, 5 norms).
MODEL_BATCHES_FULL: tuple[tuple[str, int, int], ...] = (("small", 1, 32), ("medium", 8, 128))
MODEL_BATCHES_QUICK: tuple[tuple[str, int, int], ...] = (("small", 1, 32),)

EPS = 1e-6
MODEL_SEED = 0

# Verification tolerance |out - ref| <= tol * (1 + |ref|) against the float64
# reference, by dtype. Outputs are O(1); the reduction over <= 4096 elements and
# the final rounding cost a few units of the dtype's epsilon (fp32 1.2e-7, fp16
# 9.8e-4, bf16 7.8e-3): the bounds leave ~100x headroom for fp32 yet stay far
# below the O(0.1) error of wrong math (a missing bias, a wrong eps, mean not mean-square).
OP_TOLERANCE: dict[torch.dtype, float] = {
    torch.float64: 1e-9,
    torch.float32: 1e-4,
    torch.float16: 1e-2,
    torch.bfloat16: 5e-2,
}
# The model stacks two blocks of matmuls on top: 10x the op tolerance.
MODEL_TOLERANCE_FACTOR = 10.0


def shape_label(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def parse_dtypes(spec: str) -> list[torch.dtype]:
    """"float32" or a comma list -> torch dtypes (clear error on anything else)."""
    dtypes = []
    for name in (s.strip() for s in spec.split(",") if s.strip()):
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype) or dtype not in OP_TOLERANCE:
            raise ValueError(f"--dtype must be a comma list of {[dtype_name(d) for d in OP_TOLERANCE]}, got {name!r}")
        dtypes.append(dtype)
    if not dtypes:
        raise ValueError("--dtype must name at least one dtype")
    return dtypes


@dataclass
class OpCase:
    """One norm call: x [*shape], weight and bias [hidden], realistic values."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    x: Tensor
    weight: Tensor
    bias: Tensor
    workdir: Path
    eps: float = EPS
    workload: str = field(default="op", init=False)
    _reference: Tensor | None = field(default=None, init=False, repr=False)

    @classmethod
    def create(cls, shape: tuple[int, int, int], dtype: torch.dtype, workdir: Path, seed: int = 0) -> OpCase:
        g = torch.Generator().manual_seed(seed)
        batch, seq, hidden = shape
        # Trained-norm scale: weight near 1, bias near 0, neither exactly. Drawn
        # before x, so they depend on the hidden size only (exports can be shared).
        weight = (1.0 + 0.1 * torch.randn(hidden, generator=g)).to(dtype)
        bias = (0.05 * torch.randn(hidden, generator=g)).to(dtype)
        x = example_input(batch, seq, hidden, generator=g, dtype=dtype)
        return cls(shape=tuple(shape), dtype=dtype, x=x, weight=weight, bias=bias, workdir=workdir)

    @property
    def hidden(self) -> int:
        return self.shape[-1]

    @property
    def bytes_moved(self) -> float:
        # The minimum traffic of one norm: read x, weight, bias once, write y once.
        itemsize = self.x.element_size()
        return float((2 * self.x.numel() + 2 * self.hidden) * itemsize)

    @property
    def tolerance(self) -> float:
        return OP_TOLERANCE[self.dtype]

    def reference(self) -> Tensor:
        """float64 math written out here, independent of every implementation under test."""
        if self._reference is None:
            x, w, b = self.x.double(), self.weight.double(), self.bias.double()
            self._reference = x / torch.sqrt((x * x).mean(-1, keepdim=True) + self.eps) * w + b
        return self._reference


@dataclass
class ModelCase:
    """One forward pass of the sequence model on [batch, seq, d_model] activations."""

    label: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    x: Tensor
    workdir: Path
    seed: int = MODEL_SEED
    workload: str = field(default="model", init=False)
    _reference: Tensor | None = field(default=None, init=False, repr=False)

    @classmethod
    def create(cls, label: str, batch: int, seq: int, dtype: torch.dtype, workdir: Path, seed: int = 0) -> ModelCase:
        d_model = build_model("unfused").config.d_model
        x = example_input(batch, seq, d_model, generator=torch.Generator().manual_seed(seed), dtype=dtype)
        return cls(label=label, shape=(batch, seq, d_model), dtype=dtype, x=x, workdir=workdir)

    @property
    def bytes_moved(self) -> float:
        return math.nan  # a whole model: no single "bytes moved" to compare with copy bandwidth

    @property
    def tolerance(self) -> float:
        return OP_TOLERANCE[self.dtype] * MODEL_TOLERANCE_FACTOR

    def model(self, impl: str) -> SequenceModel:
        """The model with norms computed by ``impl``; the same weights for every impl.

        Parameters stop requiring grad: an inference benchmark must not record autograd graphs.
        """
        return build_model(impl, seed=self.seed, dtype=self.dtype).requires_grad_(False)

    def forward_call(self, impl: str):
        """Build the model with ``impl`` norms; return the timed call (one forward on this case's input)."""
        model, x = self.model(impl), self.x
        return lambda: model(x)

    @torch.no_grad()
    def reference(self) -> Tensor:
        """The unfused model in float64 (same weights): the model's math without the implementations' rounding."""
        if self._reference is None:
            self._reference = build_model("unfused", seed=self.seed, dtype=torch.float64)(self.x.double())
        return self._reference


Case = OpCase | ModelCase

