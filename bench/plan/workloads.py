"""What is benchmarked: op-level cases at the shapes of bench/plan/grid.py, model-level cases.

The fused residual add + norm (workload ``add_norm``) runs at the op's CPU
shapes in a full run, and at the grid's add-norm shapes on a GPU.
Inputs, the float64 reference and the tolerances come from ops/reference.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from bench.measure.placement import NATURAL, PAGE_OFFSET, in_layout, layout_of, placed
from bench.plan.grid import Shape
from ops.model import SequenceModel, build_model, example_input
from ops.reference import (
    COMPOSITION_TOLERANCES,
    EPS,
    Tolerance,
    activations,
    make_inputs,
    model_tolerance,
    reference_add_norm,
    reference_norm,
)

MODEL_SEED = 0


@dataclass
class NormInputs:
    """x [*shape] as allocated, weight and bias [hidden] of one shape, dtype and seed.

    The op and the residual add + norm cases of one shape draw the same values: built once, they share them
    (256 MiB of x at the largest CPU shape). No variant writes into them; those that write work on copies.
    """

    x: Tensor
    weight: Tensor
    bias: Tensor
    _placed_x: Tensor | None = field(default=None, init=False, repr=False)
    _references: dict[float, Tensor] = field(default_factory=dict, init=False, repr=False)

    def reference(self, eps: float) -> Tensor:
        """The float64 norm of x: one for x at every layout, so the op's cases of this shape share it (1.5 s at
        32x512x4096, 2 threads, in each worker). It goes with these inputs, after the shape's last job."""
        if eps not in self._references:
            self._references[eps] = reference_norm(self.x, self.weight, self.bias, eps)
        return self._references[eps]

    def x_in(self, layout: str) -> Tensor:
        """x as allocated (NATURAL), or one copy of it at this process's offset into a page, made on first use."""
        if layout == NATURAL:
            return self.x
        if self._placed_x is None:
            self._placed_x = in_layout(self.x, layout)
        return self._placed_x

    @classmethod
    def create(cls, shape: Shape, dtype: torch.dtype, seed: int = 0, device: str = "cpu") -> NormInputs:
        # Residual-stream activations; weight and bias depend on the hidden size only (exports can be shared).
        x, weight, bias = make_inputs(tuple(shape), dtype, seed=seed, device=device, distribution="features")
        return cls(x, weight, bias)


@dataclass
class OpCase:
    """One norm call: x [*shape], weight and bias [hidden], realistic values, on ``device``."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    x: Tensor
    weight: Tensor
    bias: Tensor
    workdir: Path
    eps: float = EPS
    device: str = "cpu"
    layout: str = NATURAL  # where x starts in its pages (bench/measure/placement.py)
    inputs: NormInputs | None = field(default=None, repr=False)  # where x came from: its reference is shared there
    workload: str = field(default="op", init=False)
    _reference: Tensor | None = field(default=None, init=False, repr=False)

    @classmethod
    def create(
        cls,
        shape: Shape,
        dtype: torch.dtype,
        workdir: Path,
        seed: int = 0,
        device: str = "cpu",
        inputs: NormInputs | None = None,
        layout: str = NATURAL,
    ) -> OpCase:
        """``inputs``: those of this shape, dtype, seed and device, already built (shared with another case)."""
        inputs = inputs or NormInputs.create(shape, dtype, seed, device)
        return cls(
            shape=tuple(shape),
            dtype=dtype,
            x=inputs.x_in(layout),  # as allocated, or at this process's offset into a page
            weight=inputs.weight,
            bias=inputs.bias,
            workdir=workdir,
            device=device,
            layout=layout,
            inputs=inputs,
        )

    @property
    def hidden(self) -> int:
        return self.shape[-1]

    @property
    def bytes_moved(self) -> float:
        # The minimum traffic of one norm: read x, weight, bias once, write y once.
        itemsize = self.x.element_size()
        return float((2 * self.x.numel() + 2 * self.hidden) * itemsize)

    @property
    def tolerance(self) -> Tolerance:
        # verify() takes one number t for |out - ref| <= t * (1 + |ref|); the table's rtol = atol.
        return COMPOSITION_TOLERANCES[self.dtype]

    def reference(self) -> Tensor:
        if self._reference is None:
            shared = self.inputs is not None
            self._reference = (
                self.inputs.reference(self.eps) if shared else reference_norm(self.x, self.weight, self.bias, self.eps)
            )
        return self._reference


@dataclass
class AddNormCase:
    """One fused residual add + norm: x (a block's output) and residual (the stream) [*shape], weight and bias
    [hidden]; the call returns (norm(x + residual), x + residual)."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    x: Tensor
    residual: Tensor
    weight: Tensor
    bias: Tensor
    workdir: Path
    eps: float = EPS
    device: str = "cpu"
    workload: str = field(default="add_norm", init=False)
    _reference: tuple[Tensor, Tensor] | None = field(default=None, init=False, repr=False)

    @classmethod
    def create(
        cls,
        shape: Shape,
        dtype: torch.dtype,
        workdir: Path,
        seed: int = 0,
        device: str = "cpu",
        inputs: NormInputs | None = None,
    ) -> AddNormCase:
        """``inputs``: x, weight and bias of this shape, dtype, seed and device, already built (the op case's)."""
        inputs = inputs or NormInputs.create(shape, dtype, seed, device)
        x, weight, bias = inputs.x_in(PAGE_OFFSET), inputs.weight, inputs.bias  # shared, not copied
        residual = activations(tuple(shape), dtype, seed=seed + 1, device=device, distribution="features")
        return cls(
            shape=tuple(shape),
            dtype=dtype,
            x=x,
            residual=placed(residual),
            weight=weight,
            bias=bias,
            workdir=workdir,
            device=device,
        )

    @property
    def hidden(self) -> int:
        return self.shape[-1]

    @property
    def layout(self) -> str:
        return layout_of(self.x)  # x and the residual placed at this process's offset into a page

    @property
    def bytes_moved(self) -> float:
        # The minimum traffic: read x and residual, write y and the sum, read weight and bias.
        return float((4 * self.x.numel() + 2 * self.hidden) * self.x.element_size())

    @property
    def tolerance(self) -> Tolerance:
        return COMPOSITION_TOLERANCES[self.dtype]

    def reference(self) -> tuple[Tensor, Tensor]:
        """(y, sum) in float64; the sum rounded to the dtype, as every implementation stores it."""
        if self._reference is None:
            self._reference = reference_add_norm(self.x, self.residual, self.weight, self.bias, self.eps)
        return self._reference


@dataclass
class ModelCase:
    """One forward pass of the sequence model on [batch, seq, d_model] activations, on ``device``."""

    label: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    x: Tensor
    workdir: Path
    seed: int = MODEL_SEED
    device: str = "cpu"
    workload: str = field(default="model", init=False)
    _reference: Tensor | None = field(default=None, init=False, repr=False)

    @classmethod
    def create(
        cls, label: str, batch: int, seq: int, dtype: torch.dtype, workdir: Path, seed: int = 0, device: str = "cpu"
    ) -> ModelCase:
        d_model = build_model("unfused").config.d_model
        x = example_input(batch, seq, d_model, generator=torch.Generator().manual_seed(seed), dtype=dtype).to(device)
        x = placed(x)
        return cls(label=label, shape=(batch, seq, d_model), dtype=dtype, x=x, workdir=workdir, device=device)

    @property
    def layout(self) -> str:
        return layout_of(self.x)  # x placed at this process's offset into a page

    @property
    def bytes_moved(self) -> float:
        return math.nan  # a whole model: no single "bytes moved" to compare with copy bandwidth

    @property
    def tolerance(self) -> Tolerance:
        return model_tolerance(self.dtype)

    def model(self, impl: str) -> SequenceModel:
        """The model with norms computed by ``impl``; the same weights for every impl.

        Parameters stop requiring grad: an inference benchmark must not record autograd graphs.
        """
        return build_model(impl, seed=self.seed, dtype=self.dtype).to(self.device).requires_grad_(False)

    def forward_call(self, impl: str):
        """Build the model with ``impl`` norms; return the timed call (one forward on this case's input)."""
        model, x = self.model(impl), self.x
        return lambda: model(x)

    @torch.no_grad()
    def reference(self) -> Tensor:
        """The unfused model in float64 (same weights): the model's math without the implementations' rounding."""
        if self._reference is None:
            model = build_model("unfused", seed=self.seed, dtype=torch.float64).to(self.device)
            self._reference = model(self.x.double())
        return self._reference


Case = OpCase | AddNormCase | ModelCase
