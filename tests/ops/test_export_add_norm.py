"""The fused residual add + norm through every export route: the folded model, one norm with its residual, ORT.

The folded model (impl ``fused_add``) exports each residual norm as the
route's residual form: Add + the standard pattern, Add + RMSNormalization + Add,
or one two-output ``myops::fused_add_norm`` node that the project's ORT
library runs with the same kernel core as the torch op.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnxruntime.transformers.fusion_simplified_layernorm import FusionSimplifiedLayerNormalization
from onnxruntime.transformers.fusion_skiplayernorm import FusionSkipLayerNormalization
from onnxruntime.transformers.onnx_model import OnnxModel

import ops  # noqa: F401  (loads the op library)
from ops.model import ModelConfig, build_model, build_norm, example_input
from ops.onnx.checks import ExportCheckError, check_export
from ops.onnx.export import ExportError, export_model
from ops.onnx.graph import op_key
from ops.onnx.routes import ROUTES, get_route
from ops.ort.session import OrtConfig, create_session
from ops.reference import REFERENCE

CONFIG = ModelConfig(d_model=32, heads=2, layers=2)
RESIDUAL_NORMS = 2 * CONFIG.layers  # every norm but the first reads a residual sum
TOL = {"atol": 1e-4, "rtol": 1e-4}  # float32 model vs ORT, as for the unfolded model


@pytest.fixture(scope="module")
def model():
    return build_model("fused_add", seed=12, config=CONFIG)


@pytest.fixture(scope="module")
def exported(model, tmp_path_factory):
    out = tmp_path_factory.mktemp("onnx")
    x = example_input(2, 8, CONFIG.d_model)
    return {name: export_model(model, x, name, out / f"{name}.onnx") for name in ROUTES}


def _session(path, route: str):
    return create_session(path, OrtConfig(register_custom_ops=get_route(route).custom_domain))


@pytest.mark.slow  # the folded model's export by every route: about 16 s on 2 cores
@pytest.mark.parametrize("route", list(ROUTES))
def test_folded_model_exports_each_residual_norm_in_the_routes_residual_form(route, exported):
    result = exported[route]
    counts = result.report.node_counts
    if route == "custom":
        assert counts[("myops", "fused_add_norm")] == RESIDUAL_NORMS and counts[("myops", "fused_norm")] == 1
    else:
        residual_groups = [g for g in result.report.groups.values() if op_key(g[0]) == ("", "Add")]
        assert len(residual_groups) == RESIDUAL_NORMS
    assert result.norm_count == RESIDUAL_NORMS + 1


@pytest.mark.slow  # the folded model's export by every route: about 16 s on 2 cores
@pytest.mark.parametrize("route", list(ROUTES))
def test_folded_model_runs_in_ort_like_torch(route, exported, model, generator):
    session = _session(exported[route].path, route)
    for batch, seq in ((1, 3), (4, 17)):
        x = example_input(batch, seq, CONFIG.d_model, generator)
        (y,) = session.run(None, {"x": x.numpy()})
        with torch.no_grad():
            np.testing.assert_allclose(y, model(x).numpy(), **TOL)


@pytest.mark.parametrize("route", list(ROUTES))
def test_one_norm_with_its_residual_has_two_inputs_and_two_outputs(route, tmp_path, generator):
    norm = build_norm(96, "fused_add", seed=3)
    x, residual = (example_input(3, 5, 96, generator) for _ in range(2))
    result = export_model(norm, (x, residual), route, tmp_path / f"{route}.onnx")
    graph = onnx.load(result.path).graph
    assert [i.name for i in graph.input] == ["x", "residual"] and [o.name for o in graph.output] == ["y", "s"]
    y, s = _session(result.path, route).run(None, {"x": x.numpy(), "residual": residual.numpy()})
    with torch.no_grad():
        y_torch, s_torch = norm(x, residual)
    assert np.array_equal(s, s_torch.numpy())  # one float add in every route
    if route == "custom":  # the same kernel core: the same bits
        assert np.array_equal(y, y_torch.numpy())
    else:
        np.testing.assert_allclose(y, y_torch.numpy(), **REFERENCE.fp32.as_kwargs())


@pytest.mark.slow  # the folded model's export by every route: about 16 s on 2 cores
def test_standard_residual_form_fuses_into_skip_simplified_layer_normalization(exported, model, generator):
    # onnxruntime.transformers' fusions turn Add + the standard pattern into SkipSimplifiedLayerNormalization
    # (its fourth output is the sum); ORT's session optimiser of this release does not (its skip fusion takes
    # LayerNormalization only, and only where the Add feeds nothing else).
    fused = OnnxModel(onnx.load(exported["standard"].path))
    FusionSimplifiedLayerNormalization(fused).apply()
    FusionSkipLayerNormalization(fused, "SkipSimplifiedLayerNormalization", "SimplifiedLayerNormalization").apply()
    fused.prune_graph()
    if not any(o.domain == "com.microsoft" for o in fused.model.opset_import):
        fused.model.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    kinds = [n.op_type for n in fused.model.graph.node]
    assert kinds.count("SkipSimplifiedLayerNormalization") == RESIDUAL_NORMS
    assert kinds.count("SimplifiedLayerNormalization") == 1  # the first norm has no residual
    x = example_input(2, 9, CONFIG.d_model, generator)
    (y,) = create_session(fused.model.SerializeToString(), OrtConfig()).run(None, {"x": x.numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(y, model(x).numpy(), **TOL)


@pytest.mark.slow  # the folded model's export by every route: about 16 s on 2 cores
def test_checks_catch_a_residual_add_of_a_constant(exported, model):
    broken = onnx.ModelProto()
    broken.CopyFrom(onnx.load(exported["standard"].path))
    first_add = next(n for n in broken.graph.node if n.op_type == "Add" and "norm2" in str(n.metadata_props))
    constant = broken.graph.initializer[0].name
    first_add.input[1] = constant
    with pytest.raises(ExportCheckError, match="the residual Add must add two computed values"):
        check_export(broken, get_route("standard"), model, ["x"])


@pytest.mark.slow  # the folded model's export by every route: about 16 s on 2 cores
def test_checks_catch_a_custom_residual_node_without_its_sum_output(exported, model):
    broken = onnx.ModelProto()
    broken.CopyFrom(onnx.load(exported["custom"].path))
    node = next(n for n in broken.graph.node if n.op_type == "fused_add_norm")
    del node.output[1:]
    with pytest.raises(ExportCheckError, match="fused_add_norm has 4 inputs and 1 outputs, expected 4 and 2"):
        check_export(broken, get_route("custom"), model, ["x"])


def test_torchscript_exporter_refuses_the_folded_model(model, tmp_path):
    with pytest.raises(ExportError, match="impl 'fused_add' exports with the dynamo exporter only"):
        export_model(model, example_input(2, 8, CONFIG.d_model), "standard", tmp_path / "m.onnx", dynamo=False)


def test_ort_custom_op_names_a_bad_residual(tmp_path, generator):
    norm = build_norm(32, "fused_add", seed=1)
    x = example_input(2, 4, 32, generator)
    result = export_model(norm, (x, x.clone()), "custom", tmp_path / "n.onnx")
    session = _session(result.path, "custom")
    # ORT itself refuses a dtype the graph does not declare; a shape that disagrees with x reaches the kernel.
    bad = np.zeros((2, 5, 32), dtype=np.float32)
    with pytest.raises(Exception, match=r"fused_add_norm: residual must have X's dtype and shape float32\[2, 4, 32\]"):
        session.run(None, {"x": x.numpy(), "residual": bad})
    (y, s) = session.run(None, {"x": x.numpy(), "residual": x.numpy()})  # the session still works
    assert np.isfinite(y).all() and np.array_equal(s, 2 * x.numpy())


@pytest.mark.slow  # three exports of the folded model and ORT sessions with every block output
def test_the_folded_model_aligns_block_by_block_on_every_route(tmp_path):
    from ops.alignment.check import check_alignment

    report = check_alignment(
        "all",
        tmp_path,
        layers=True,
        dtypes=("float32",),
        op_hidden_sizes=(64,),
        op_shapes=((2, 3),),
        model_shapes=((2, 5),),
        impl="fused_add",
        echo=False,
    )
    blocks = [c for c in report.cases if c.level.startswith("block")]
    assert len(blocks) == len(ROUTES) * 2 and not report.failures  # the default model has two blocks
    assert report.first_divergent_block == {name: "" for name in ROUTES}
    assert all(c.result.cosine > 0.999999 for c in blocks)


def test_block_outputs_of_the_folded_model_are_the_residual_sums(generator):
    # In torch: what each block's follower norm returns as its sum is what the unfolded model's block returns.
    from ops.alignment.layers import torch_block_outputs
    from ops.model import with_norm_impl

    folded = build_model("fused_add", seed=5, config=CONFIG)
    x = example_input(2, 6, CONFIG.d_model, generator)
    y_folded, blocks_folded = torch_block_outputs(folded, x)
    y, blocks = torch_block_outputs(with_norm_impl(folded, "fused"), x)
    assert torch.equal(y_folded, y) and len(blocks_folded) == len(blocks) == CONFIG.layers
    assert all(torch.equal(a, b) for a, b in zip(blocks_folded, blocks, strict=True))


def test_export_task_refuses_an_impl_the_routes_do_not_translate(tmp_path):
    from ops.onnx.export import export_routes

    with pytest.raises(ValueError, match="--impl must be one of fused, fused_add, got 'native'"):
        export_routes("custom", tmp_path, impl="native")
    assert not list(tmp_path.iterdir())


@pytest.mark.slow  # one export of the default-size folded model
def test_export_task_writes_the_folded_model_beside_the_others(tmp_path, capsys):
    from ops.onnx.export import export_routes

    (result,) = export_routes("custom", tmp_path, impl="fused_add")
    assert result.path == tmp_path / "custom.fused_add.onnx" and result.path.is_file()
    assert "myops::fused_add_norm(X, " in capsys.readouterr().out
