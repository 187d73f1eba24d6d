"""Both ops' models through ONNX Runtime by every route, on each device's provider: the norm model (impl
``fused``) and the residual add + norm model (impl ``fused_add``), exported by the standard (mapped), opset-23 and
custom routes.

- The session's optimised graph holds one fused node per norm: SimplifiedLayerNormalization (or, where the
  provider folds the residual Add into it, SkipSimplifiedLayerNormalization) for the standard route,
  RMSNormalization for opset 23, the library's nodes for the custom route, and none of the decomposed pattern
  (Pow, ReduceMean, Sqrt, Reciprocal, Div).
- The output matches the model run in float64 by torch, within the float32 tolerance of the routes' tests.
- On CUDA the session runs on CUDAExecutionProvider with its input and output bound to CUDA tensors (IO binding on
  device memory: nothing passes through the host).
"""

from __future__ import annotations

import copy
from collections import Counter

import numpy as np
import onnx
import pytest
import torch

import ops  # noqa: F401  (loads the op library)
from ops.model import ModelConfig, build_model, example_input
from ops.onnx.export import export_model
from ops.onnx.routes import get_route
from ops.ort.session import OrtConfig, create_session
from tests.helpers.devices import run_bound_on_cuda, skip_without_ort_cuda

# Six exports by the dynamo exporter (about 30 s on 2 cores): the slow tier runs the CPU provider, `invoke gpu-check`
# the CUDA one (its GPU tests select by the gpu marker alone).
pytestmark = pytest.mark.slow

CONFIG = ModelConfig(d_model=32, heads=2, layers=2)
IMPLS = ("fused", "fused_add")  # the norm's model and the residual add + norm's
ROUTES = ("standard", "opset23", "custom")
FUSED_NODES = {
    "standard": {("", "SimplifiedLayerNormalization"), ("com.microsoft", "SkipSimplifiedLayerNormalization")},
    "opset23": {("", "RMSNormalization")},
    "custom": {("myops", "fused_norm"), ("myops", "fused_add_norm")},
}
DECOMPOSED = {"Pow", "ReduceMean", "Sqrt", "Reciprocal", "Div"}
# float32 against float64 through two blocks: a few ulp per op (the routes' tests use the same bound).
TOL = {"atol": 1e-4, "rtol": 1e-4}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(impl, route) -> (model, exported file), exported once for the module."""
    out = tmp_path_factory.mktemp("onnx")
    files = {}
    for impl in IMPLS:
        model = build_model(impl, seed=13, config=CONFIG)
        x = example_input(2, 8, CONFIG.d_model)
        for route in ROUTES:
            files[impl, route] = (model, export_model(model, x, route, out / f"{impl}-{route}.onnx"))
    return files


def _float64(model, x: torch.Tensor) -> torch.Tensor:
    """The model run by torch in float64, with its own weights."""
    twin = copy.deepcopy(model).double()
    with torch.no_grad():
        return twin(x.double())


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("impl", IMPLS)
def test_route_runs_fused_on_the_device_and_matches_float64(exported, impl, route, device, tmp_path, generator):
    provider = "cpu"
    if device == "cuda":
        skip_without_ort_cuda()
        provider = "cuda"
    model, result = exported[impl, route]
    optimized = tmp_path / "optimized.onnx"
    session = create_session(
        result.path,
        OrtConfig(
            provider=provider,
            optimization="all",
            optimized_model_path=optimized,
            register_custom_ops=get_route(route).custom_domain,
        ),
    )
    if provider == "cuda":
        assert session.get_providers()[0] == "CUDAExecutionProvider"

    nodes = Counter((n.domain or "", n.op_type) for n in onnx.load(optimized).graph.node)
    fused = sum(nodes[key] for key in FUSED_NODES[route])
    assert fused == result.norm_count, (impl, route, nodes)
    assert not DECOMPOSED & {op for _, op in nodes}, (impl, route, nodes)

    x = example_input(5, 64, CONFIG.d_model, generator)
    expected = _float64(model, x)
    if provider == "cuda":
        inputs = {"x": x.to("cuda")}
        out = torch.full(tuple(expected.shape), float("nan"), device="cuda")
        run_bound_on_cuda(session, inputs, {session.get_outputs()[0].name: out})
        got = out.cpu()
    else:
        got = torch.from_numpy(session.run(None, {"x": x.numpy()})[0])
    mismatched = ~torch.isclose(got.double(), expected, **TOL)
    assert int(mismatched.sum()) == 0, f"{int(mismatched.sum())} of {got.numel()} elements outside {TOL}"
    assert np.isfinite(got.numpy()).all()
