"""A small served model, exported once per test session by every route (shared by the serving tests)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bench.serve.models import ServedModel, export_routes
from ops.model import ModelConfig

# Small enough that 10,000 requests take seconds: the tests check correctness under load, not speed.
SMALL = ServedModel(ModelConfig(d_model=32, heads=2, layers=1), batch=1, seq=8)
# The same model with each block's residual add folded into the norm op.
SMALL_FOLDED = replace(SMALL, impl="fused_add")


def small_model_files(tmp_path_factory, model: ServedModel = SMALL) -> dict[str, Path]:
    """route -> ONNX file of ``model``; exported on first use, reused by every later test in the session."""
    return export_routes(model, tmp_path_factory.getbasetemp() / "served-small")
