"""Runs inside a fresh environment where only the wheel and the lock's runtime pins are installed.

Run as a script from a folder outside the checkout; prints one JSON object:
where ops was imported from, which libraries it loaded, and each check's
largest error against the float64 reference with the bound it had to meet.
Only the installed package, torch, numpy, onnx and onnxruntime are used.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

import ops
from ops.model import ModelConfig, build_model, example_input
from ops.onnx.export import export_model
from ops.onnx.routes import ROUTES
from ops.ort.session import IOBoundRunner, OrtConfig, create_session
from ops.reference import (
    EPS,
    make_generator,
    make_inputs,
    model_tolerance,
    reference_add_norm,
    reference_norm,
    tolerance,
)


def worst(actual: torch.Tensor, reference: torch.Tensor, bound: torch.Tensor) -> dict[str, float | bool]:
    """The largest error and whether every element is within its bound (a NaN is not)."""
    error = (actual.double() - reference).abs()
    return {"max_error": float(error.max()), "within": bool((error <= bound).all())}


def check_ops() -> dict[str, dict]:
    """Both ops on the CPU, against the float64 reference of the same rounded inputs."""
    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        x, weight, bias = make_inputs((4, 16, 96), dtype, seed=11)
        residual = make_inputs((4, 16, 96), dtype, seed=12)[0]
        tol = tolerance(dtype)
        wide = [t.double() for t in (x, residual, weight, bias)]
        y_ref = reference_norm(wide[0], wide[2], wide[3], EPS)
        results[f"fused_norm/{dtype}"] = worst(ops.fused_norm(x, weight, bias, EPS), y_ref, tol.bound(y_ref))
        y, s = ops.fused_add_norm(x, residual, weight, bias, EPS)
        y_ref, s_ref = reference_add_norm(x, residual, wide[2], wide[3], EPS)
        results[f"fused_add_norm/{dtype}"] = worst(y, y_ref, tol.bound(y_ref))
        # The sum is rounded once to the dtype, as the reference stores it: equal bit for bit.
        results[f"fused_add_norm/{dtype}/sum"] = worst(s, s_ref, torch.zeros_like(s_ref))
    return results


def check_routes(work: Path) -> dict[str, dict]:
    """The sequence model exported by every route, run in ORT with the packaged library, against float64."""
    config = ModelConfig(d_model=64, heads=2, layers=2)
    results = {}
    for impl in ("fused", "fused_add"):
        model = build_model(impl, config, seed=3)
        reference_model = build_model("unfused", config, seed=3, dtype=torch.float64)
        x = example_input(2, 8, config.d_model, make_generator(5))
        with torch.no_grad():
            y_ref = reference_model(x.double())
        bound = model_tolerance(torch.float32).bound(y_ref)
        for route in ROUTES:
            exported = export_model(model, x, route, work / f"{impl}-{route}.onnx")
            session = create_session(exported.path, OrtConfig(provider="cpu", register_custom_ops=True))
            name = session.get_inputs()[0].name
            (y,) = IOBoundRunner(session).run({name: x.numpy()})[:1]
            results[f"{impl}/{route}"] = worst(torch.from_numpy(np.asarray(y)), y_ref, bound)
    return results


def main() -> None:
    work = Path(sys.argv[1])
    print(
        json.dumps(
            {
                "ops_file": ops.__file__,
                "torch_library": str(ops.torch_library_path()),
                "ort_library": str(ops.ort_library_path()),
                "modules": sorted(m for m in sys.modules if m == "env" or m.startswith("env.")),
                "ops": check_ops(),
                "routes": check_routes(work),
            }
        )
    )


if __name__ == "__main__":
    main()
