"""The served model: its size, its export by each route, and a bank of inputs with reference outputs.

Every request sends one input of a bank of distinct inputs; its response is
checked against that input's reference, computed independently of every
served implementation: the same weights in float64 with the unfused torch
norm. A response that came from another request's buffer, or from a slot
that was left dirty, differs from its reference by O(1) and counts as a mismatch.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from ops.model import ModelConfig, build_model, example_input
from ops.onnx.routes import ROUTES
from ops.reference import Tolerance, model_tolerance

_EXPORT_BATCH, _EXPORT_SEQ = 2, 4  # the exporter needs dynamic dims of size >= 2 in the example


# The model's norm implementations that can be served: the fused op, or the fused op with each block's
# residual add folded into it (exported in each route's residual form).
SERVED_IMPLS = ("fused", "fused_add")


@dataclass(frozen=True)
class ServedModel:
    """The sequence model's size, its norm implementation and the request shape [batch, seq, d_model]."""

    config: ModelConfig = ModelConfig()
    batch: int = 1
    seq: int = 32
    seed: int = 0
    impl: str = "fused"

    def __post_init__(self) -> None:
        if self.impl not in SERVED_IMPLS:
            raise ValueError(f"impl must be one of {', '.join(SERVED_IMPLS)}, got {self.impl!r}")

    @property
    def d_model(self) -> int:
        return self.config.d_model

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.batch, self.seq, self.d_model)

    @property
    def file_prefix(self) -> str:
        """Exported files of the default impl keep their plain names; another impl's carry its name."""
        return "served" if self.impl == "fused" else f"served-{self.impl}"

    def torch_model(self, dtype: torch.dtype = torch.float32, impl: str | None = None):
        return build_model(impl or self.impl, self.config, seed=self.seed, dtype=dtype)


def export_routes(model: ServedModel, folder: Path) -> dict[str, Path]:
    """route -> ONNX file of ``model`` in ``folder``; a file exported earlier for the same model is reused."""
    from ops.onnx.export import export_model

    folder.mkdir(parents=True, exist_ok=True)
    stamp = folder / f"{model.file_prefix}-model.json"
    wanted = json.dumps(asdict(model), sort_keys=True)
    paths = {route: folder / f"{model.file_prefix}-{route}.onnx" for route in ROUTES}
    if stamp.exists() and stamp.read_text() == wanted and all(p.exists() for p in paths.values()):
        return paths
    stamp.unlink(missing_ok=True)
    module = model.torch_model()
    example = example_input(_EXPORT_BATCH, _EXPORT_SEQ, model.d_model)
    for route, path in paths.items():
        export_model(module, example, route, path)
    stamp.write_text(wanted)
    return paths


@dataclass
class Bank:
    """Distinct request inputs and their float64 references; ``matches`` decides a response."""

    inputs: list[np.ndarray]
    references: list[np.ndarray]
    tolerance: Tolerance

    def __len__(self) -> int:
        return len(self.inputs)

    def matches(self, index: int, output: np.ndarray) -> bool:
        """|out - ref| <= atol + rtol * |ref| everywhere, NaN exactly where the reference is NaN."""
        reference = self.references[index]
        if output.shape != reference.shape:
            return False
        nan = np.isnan(reference)
        if not np.array_equal(nan, np.isnan(output)):
            return False
        error = np.abs(output.astype(np.float64) - reference)
        bound = self.tolerance.bound(reference)
        return bool(np.all((error <= bound)[~nan]))


def make_bank(model: ServedModel, size: int = 64, seed: int = 1) -> Bank:
    """``size`` distinct inputs (realistic activations, own seed each) and their references."""
    reference_model = model.torch_model(torch.float64, impl="unfused")
    inputs, references = [], []
    with torch.inference_mode():
        for i in range(size):
            x = example_input(model.batch, model.seq, model.d_model, torch.Generator().manual_seed(seed * 100_003 + i))
            inputs.append(x.numpy())
            references.append(reference_model(x.double()).numpy())
    return Bank(inputs, references, model_tolerance(torch.float32))
