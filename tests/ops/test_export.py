"""ONNX export routes: each exports, passes its checks, runs in ORT and onnx.reference, and matches PyTorch.

The checks themselves are tested against broken graphs (a wrong axis, eps,
stray node, a weight turned into an input, ...): a check that cannot fail
proves nothing.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

import ops  # noqa: F401  (loads the op library)
from ops.model import ModelConfig, build_model, build_norm, example_input
from ops.onnx.checks import ExportCheckError, check_export
from ops.onnx.export import ExportError, export_model
from ops.onnx.graph import norm_groups, op_key
from ops.onnx.routes import ROUTES, get_route, parse_routes
from ops.ort.session import CustomOpsNotRegisteredError, OrtConfig, create_session
from ops.reference import REFERENCE

CONFIG = ModelConfig(d_model=32, heads=2, layers=2)
NORMS = 2 * CONFIG.layers + 1
# (batch, seq) sizes at run time, none of them the export example's (2, 8).
SIZES = ((1, 1), (3, 5), (5, 64))
# float32 vs ORT: a few ulp per op, through two blocks (ops/alignment/metrics.py).
TOL = {"atol": 1e-4, "rtol": 1e-4}


@pytest.fixture(scope="module")
def model():
    return build_model("fused", seed=11, config=CONFIG)


@pytest.fixture(scope="module")
def exported(model, tmp_path_factory):
    """Each route's file, exported once for the module (dynamo exporter)."""
    out = tmp_path_factory.mktemp("onnx")
    x = example_input(2, 8, CONFIG.d_model)
    return {name: export_model(model, x, name, out / f"{name}.onnx") for name in ROUTES}


def _run(path_or_bytes, x: np.ndarray, route: str, **config) -> np.ndarray:
    session = create_session(path_or_bytes, OrtConfig(register_custom_ops=get_route(route).custom_domain, **config))
    return session.run(None, {"x": x})[0]


def _torch(model, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


# --- each route: export, checks, run ------------------------------------------------


@pytest.mark.parametrize("route", list(ROUTES))
def test_route_exports_with_promised_nodes(route, exported):
    result = exported[route]
    model = onnx.load(result.path)
    assert result.norm_count == NORMS
    groups = norm_groups(model, result.report.norm_paths)
    for path, nodes in groups.items():
        assert tuple(op_key(n) for n in nodes if n.op_type != "Constant") == ROUTES[route].norm_ops, path
    counts = Counter(op_key(n) for n in model.graph.node)
    assert counts[("myops", "fused_norm")] == (NORMS if route == "custom" else 0)
    assert {o.domain or "": o.version for o in model.opset_import} == ROUTES[route].opset_imports
    # The summary shows every norm, one line each, with its nodes in order.
    norm_lines = [line for line in result.summary.splitlines() if "X=" in line]
    assert len(norm_lines) == NORMS
    first = {
        "standard": "Pow(X, 2) -> ReduceMean(., [-1]",
        "opset23": "RMSNormalization(X, weight[32]",
        "custom": "myops::fused_norm(X, weight[32], bias[32], epsilon=1e-06)",
    }
    assert all(first[route] in line for line in norm_lines), result.summary


@pytest.mark.parametrize("route", list(ROUTES))
def test_route_runs_in_ort_at_several_sizes(route, exported, model, generator):
    for batch, seq in SIZES:
        x = example_input(batch, seq, CONFIG.d_model, generator).numpy()
        y = _run(exported[route].path, x, route)
        assert y.shape == x.shape and np.isfinite(y).all()
        np.testing.assert_allclose(y, _torch(model, x), **TOL)


@pytest.mark.parametrize("route", ["standard", "opset23"])
def test_standard_graphs_match_in_onnx_reference_evaluator(route, exported, model, generator):
    """An ONNX runtime independent of ORT (onnx.reference) computes the same as PyTorch."""
    evaluator = ReferenceEvaluator(onnx.load(exported[route].path))
    for batch, seq in ((1, 1), (2, 7)):
        x = example_input(batch, seq, CONFIG.d_model, generator).numpy()
        np.testing.assert_allclose(evaluator.run(None, {"x": x})[0], _torch(model, x), **TOL)


def test_standard_route_fuses_one_node_per_norm(exported, tmp_path, generator):
    optimized = tmp_path / "standard.optimized.onnx"
    x = example_input(2, 3, CONFIG.d_model, generator).numpy()
    _run(exported["standard"].path, x, "standard", optimization="all", optimized_model_path=optimized)
    counts = Counter(op_key(n) for n in onnx.load(optimized).graph.node)
    assert counts[("", "SimplifiedLayerNormalization")] == NORMS
    assert counts[("", "Pow")] == counts[("", "ReduceMean")] == counts[("", "Sqrt")] == 0
    # And with optimisation off, nothing fuses (the count above is ORT's doing).
    unoptimized = tmp_path / "standard.unoptimized.onnx"
    _run(exported["standard"].path, x, "standard", optimization="disable", optimized_model_path=unoptimized)
    assert Counter(op_key(n) for n in onnx.load(unoptimized).graph.node)[("", "Pow")] == NORMS


def test_ort_float64_fusion_uses_its_default_epsilon(tmp_path):
    """Measured ORT 1.31 behaviour, documented here: in a float64 graph SimplifiedLayerNormFusion
    writes epsilon=1e-5 (its default) instead of the graph's eps; float32 keeps the graph's eps.
    So the standard route in float64 must run with optimisation below 'extended' (invoke align
    --dtype float64 shows the error). If this fails, ORT changed: update the README."""
    eps_of = {}
    for dtype in (torch.float32, torch.float64):
        norm = build_norm(16, eps=1e-6, dtype=dtype)
        result = export_model(norm, example_input(2, 3, 16, dtype=dtype), "standard", tmp_path / f"n_{dtype}.onnx")
        optimized = tmp_path / f"n_{dtype}.opt.onnx"
        create_session(
            result.path, OrtConfig(optimization="extended", register_custom_ops=False, optimized_model_path=optimized)
        )
        (fused,) = [n for n in onnx.load(optimized).graph.node if n.op_type == "SimplifiedLayerNormalization"]
        eps_of[dtype] = onnx.helper.get_attribute_value(next(a for a in fused.attribute if a.name == "epsilon"))
    assert eps_of[torch.float32] == pytest.approx(1e-6, rel=1e-6)
    assert eps_of[torch.float64] == pytest.approx(1e-5, rel=1e-6)


def test_custom_route_needs_the_library(exported, model, generator):
    x = example_input(2, 4, CONFIG.d_model, generator).numpy()
    with pytest.raises(CustomOpsNotRegisteredError, match=r"myops::fused_norm.*register_custom_ops=True"):
        create_session(exported["custom"].path, OrtConfig(register_custom_ops=False))
    np.testing.assert_allclose(_run(exported["custom"].path, x, "custom"), _torch(model, x), **TOL)


@pytest.mark.parametrize("route", list(ROUTES))
def test_single_norm_exports_and_matches(route, tmp_path, generator):
    """The op alone (what the op-level benchmarks export), odd hidden size."""
    norm = build_norm(77, seed=3)
    result = export_model(norm, example_input(2, 3, 77), route, tmp_path / f"norm_{route}.onnx")
    assert result.report.norm_paths == [""] and result.norm_count == 1
    for batch, seq in ((1, 1), (4, 9)):
        x = example_input(batch, seq, 77, generator).numpy()
        np.testing.assert_allclose(_run(result.path, x, route), _torch(norm, x), **REFERENCE.fp32.as_kwargs())


# --- the TorchScript exporter -------------------------------------------------------


@pytest.mark.parametrize("route", ["standard", "custom"])
def test_torchscript_exporter_gives_equivalent_graph(route, exported, model, tmp_path, generator):
    ts = export_model(model, example_input(2, 8, CONFIG.d_model), route, tmp_path / f"{route}.ts.onnx", dynamo=False)
    assert ts.exporter == "torchscript"
    dynamo_groups = exported[route].report.groups
    for path, nodes in ts.report.groups.items():
        ops_ts = [op_key(n) for n in nodes if n.op_type != "Constant"]
        ops_dynamo = [op_key(n) for n in dynamo_groups[path] if n.op_type != "Constant"]
        assert ops_ts == ops_dynamo, path
    for batch, seq in ((1, 1), (3, 17)):
        x = example_input(batch, seq, CONFIG.d_model, generator).numpy()
        np.testing.assert_allclose(
            _run(ts.path, x, route), _run(exported[route].path, x, route), **REFERENCE.fp32.as_kwargs()
        )


def test_torchscript_exporter_has_no_opset23_route(model, tmp_path):
    with pytest.raises(ExportError, match="opset 20 at most"):
        export_model(model, example_input(2, 8, CONFIG.d_model), "opset23", tmp_path / "x.onnx", dynamo=False)


# --- bad requests ---------------------------------------------------------------------


def test_export_rejects_unfused_norms_and_bad_inputs(tmp_path):
    unfused = build_model("unfused", config=CONFIG)
    with pytest.raises(ExportError, match="impl='fused'"):
        export_model(unfused, example_input(2, 8, CONFIG.d_model), "standard", tmp_path / "u.onnx")
    with pytest.raises(ValueError, match="sizes >= 2"):
        export_model(build_norm(8), torch.randn(1, 4, 8), "standard", tmp_path / "n.onnx")
    with pytest.raises(ValueError, match="route must be one of"):
        export_model(build_norm(8), torch.randn(2, 4, 8), "fast", tmp_path / "n.onnx")
    with pytest.raises(ValueError, match="route must be"):
        parse_routes(" , ")
    assert [r.name for r in parse_routes("custom,standard,custom")] == ["custom", "standard"]
    assert not list(tmp_path.iterdir()), "nothing may be written for a rejected request"


# --- the checks catch broken graphs ------------------------------------------------------


def _broken(exported, route: str, edit) -> onnx.ModelProto:
    model = onnx.load(exported[route].path)
    edit(model)
    return model


def _first(model: onnx.ModelProto, op_type: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.op_type == op_type)


def _set_initializer(model: onnx.ModelProto, name: str, value: np.ndarray) -> None:
    for i, init in enumerate(model.graph.initializer):
        if init.name == name:
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(value, name))
            return
    raise KeyError(name)


def _edit_axes(model):
    # A classic export bug: ReduceMean over the wrong axis; a fresh axes constant so only this norm changes.
    model.graph.initializer.append(numpy_helper.from_array(np.array([1], dtype=np.int64), "wrong_axes"))
    _first(model, "ReduceMean").input[1] = "wrong_axes"


def _edit_eps(model):
    add = next(
        n
        for n in model.graph.node
        if n.op_type == "Add" and "ReduceMean" in str([_producer(model, i) for i in n.input])
    )
    model.graph.initializer.append(numpy_helper.from_array(np.array(1e-5, dtype=np.float32), "wrong_eps"))
    add.input[1] = "wrong_eps"


def _producer(model, name):
    return next((n.op_type for n in model.graph.node if name in n.output), None)


def _edit_pow(model):
    model.graph.initializer.append(numpy_helper.from_array(np.array(3.0, dtype=np.float32), "three"))
    _first(model, "Pow").input[1] = "three"


def _edit_weight_to_input(model):
    weight = next(i for i in model.graph.initializer if i.name.endswith("norm1.weight"))
    model.graph.input.append(onnx.helper.make_tensor_value_info(weight.name, weight.data_type, list(weight.dims)))
    model.graph.initializer.remove(weight)


def _edit_stray_custom(model):
    node = _first(model, "Softmax")
    node.domain, node.op_type = "myops", "fused_norm"


def _edit_opset(model):
    model.opset_import.append(onnx.helper.make_opsetid("myops", 1))


def _edit_custom_output_shape(model):
    node = _first(model, "fused_norm")
    for value in list(model.graph.value_info):
        if value.name == node.output[0]:
            model.graph.value_info.remove(value)


def _edit_custom_eps_attribute(model):
    node = _first(model, "fused_norm")
    node.attribute[0].f = 1e-3


def _edit_rms_axis(model):
    node = _first(model, "RMSNormalization")
    next(a for a in node.attribute if a.name == "axis").i = 0


def _edit_bias_values(model):
    bias = next(i for i in model.graph.initializer if i.name.endswith("final_norm.bias"))
    _set_initializer(model, bias.name, np.zeros(bias.dims, dtype=np.float32))


def _edit_unfolded_weight(model):
    # A weight that became a runtime computation: Mul(weight, 1) left in front of the norm's Mul.
    mul = next(n for n in model.graph.node if n.op_type == "Mul" and n.input[1].endswith("norm1.weight"))
    model.graph.initializer.append(numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one"))
    model.graph.node.insert(
        0, onnx.helper.make_node("Mul", [mul.input[1], "one"], ["computed_weight"], name="scale_weight")
    )
    mul.input[1] = "computed_weight"


def _edit_fixed_batch(model):
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2


@pytest.mark.parametrize(
    "route, edit, message",
    [
        ("standard", _edit_axes, r"ReduceMean axes \[1\] are not \[-1\]"),
        ("standard", _edit_eps, "does not add the constant eps 1e-06"),
        ("standard", _edit_pow, "Pow exponent is 3.0"),
        ("standard", _edit_weight_to_input, "weight 'blocks.0.norm1.weight' is not an initializer"),
        ("standard", _edit_stray_custom, "stray node"),
        ("standard", _edit_opset, "opset imports"),
        ("standard", _edit_unfolded_weight, "computes only from constants"),
        ("standard", _edit_bias_values, "does not hold the module's bias"),
        ("opset23", _edit_rms_axis, "RMSNormalization axis 0 is not -1"),
        ("custom", _edit_custom_output_shape, "records no shape for fused_norm's output"),
        ("custom", _edit_custom_eps_attribute, "expected only the float epsilon=1e-06"),
        ("custom", _edit_fixed_batch, r"dims \[0\] are fixed"),
    ],
)
def test_checks_catch_broken_graphs(route, edit, message, exported, model):
    broken = _broken(exported, route, edit)
    with pytest.raises(ExportCheckError, match=message):
        check_export(broken, ROUTES[route], model, ["x"])


def test_strict_inference_follows_shapes_through_the_custom_node(exported, model):
    """With the myops schema registered, a weight of the wrong length is an inference error."""

    def edit(m):
        node = _first(m, "fused_norm")
        short = numpy_helper.from_array(np.ones(CONFIG.d_model - 1, dtype=np.float32), "short_weight")
        m.graph.initializer.append(short)
        node.input[1] = "short_weight"

    with pytest.raises(ExportCheckError, match="strict shape inference: .*weight has length 31, X's last dim is 32"):
        check_export(_broken(exported, "custom", edit), ROUTES["custom"], model, ["x"])


def test_rejected_export_is_kept_aside(model, tmp_path, monkeypatch):
    """A file that fails its checks is not written at the target path, but kept for inspection."""
    import ops.onnx.export as export_module

    def failing_check(*args, **kwargs):
        raise ExportCheckError("route 'standard': 1 post-export check(s) failed:\n  - injected")

    monkeypatch.setattr(export_module, "check_export", failing_check)
    target = tmp_path / "model.onnx"
    with pytest.raises(ExportCheckError, match="rejected file is kept at .*model.rejected.onnx"):
        export_model(model, example_input(2, 8, CONFIG.d_model), "standard", target, dynamo=False)
    assert not target.exists() and (tmp_path / "model.rejected.onnx").exists()


@pytest.mark.parametrize("route", ["standard", "custom"])
def test_an_export_with_the_reused_torchlib_registry_writes_the_same_file(route, tmp_path, monkeypatch, generator):
    # The exporter's registry is built once per opset and process; every export after that gets a copy. The file
    # must be byte for byte the one an export building its own registry writes, and the route's translation
    # registered into one export's copy must not reach the next export's.
    import contextlib

    from torch.onnx._internal.exporter import _registration

    import ops.onnx.export as export

    norm = build_norm(256, seed=int(torch.randint(0, 2**31, (1,), generator=generator)))
    x = torch.randn(2, 3, 256, generator=generator)
    other = "opset23" if route == "standard" else "standard"
    export_model(norm, x, other, tmp_path / "other.onnx")  # registers the other route's translation in its copy
    builds = []
    original = _registration.ONNXRegistry.__dict__["from_torchlib"].__func__

    def counted(cls, opset_version=20):
        builds.append(opset_version)
        return original(cls, opset_version=opset_version)

    monkeypatch.setattr(_registration.ONNXRegistry, "from_torchlib", classmethod(counted))
    export_model(norm, x, route, tmp_path / "reused.onnx")
    export_model(norm, x, route, tmp_path / "reused-again.onnx")
    reused_builds = list(builds)
    monkeypatch.setattr(export, "_torchlib_registry_reused", contextlib.nullcontext)
    export_model(norm, x, route, tmp_path / "own.onnx")
    opset = get_route(route).opset
    assert reused_builds.count(opset) <= 1 and builds[len(reused_builds) :] == [opset]
    reused, again, own = (onnx.load(tmp_path / f"{n}.onnx") for n in ("reused", "reused-again", "own"))
    assert reused.SerializeToString() == own.SerializeToString() == again.SerializeToString()


def test_exports_in_two_threads_leave_the_exporters_registry_builder_as_it_was(tmp_path, generator):
    import threading

    from torch.onnx._internal.exporter import _registration

    original = _registration.ONNXRegistry.__dict__["from_torchlib"]
    norm = build_norm(128, seed=int(torch.randint(0, 2**31, (1,), generator=generator)))
    x = torch.randn(2, 3, 128, generator=generator)
    failures = []

    def export(route):
        try:
            export_model(norm, x, route, tmp_path / f"{route}.onnx")
        except Exception as error:  # reported below: a thread's exception would otherwise be lost
            failures.append(error)

    threads = [threading.Thread(target=export, args=(route,)) for route in ("standard", "custom")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    assert _registration.ONNXRegistry.__dict__["from_torchlib"] is original
    assert all((tmp_path / f"{route}.onnx").is_file() for route in ("standard", "custom"))


def test_an_export_of_a_module_another_thread_is_tracing_waits_for_it(tmp_path, generator):
    """torch.export swaps the module's parameters for fake tensors while it traces; a second export of the same
    module started in that window must not run the module or read its parameters until the first is done."""
    import threading
    import time

    from torch._subclasses.fake_tensor import FakeTensor

    norm = build_norm(128, seed=int(torch.randint(0, 2**31, (1,), generator=generator)))
    x = torch.randn(2, 3, 128, generator=generator)
    tracing = threading.Event()
    first_trace = {}
    failures = []
    met_the_other_trace = []

    def hold_the_trace_open(module, args):
        if not isinstance(module.weight, FakeTensor):
            return
        if not tracing.is_set():
            first_trace.update(thread=threading.get_ident(), mode=module.weight.fake_mode)
            tracing.set()
            time.sleep(0.5)  # the window in which the other thread's export starts
        elif threading.get_ident() != first_trace["thread"] and module.weight.fake_mode is first_trace["mode"]:
            met_the_other_trace.append(threading.get_ident())

    norm.register_forward_pre_hook(hold_the_trace_open)

    def export(route):
        try:
            export_model(norm, x, route, tmp_path / f"{route}.onnx")
        except Exception as error:  # reported below: a thread's exception would otherwise be lost
            failures.append(error)

    first = threading.Thread(target=export, args=("standard",))
    first.start()
    assert tracing.wait(timeout=120), "the first export never traced the module"
    second = threading.Thread(target=export, args=("custom",))
    second.start()
    first.join()
    second.join()
    assert not failures, failures
    assert not met_the_other_trace, (
        "the second export ran the module while the first one's trace had swapped its weights"
    )
    for route in ("standard", "custom"):  # each file holds the real weights, not the fake ones of the trace
        np.testing.assert_allclose(
            _run(tmp_path / f"{route}.onnx", x.numpy(), route), _torch(norm, x.numpy()), **REFERENCE.fp32.as_kwargs()
        )
