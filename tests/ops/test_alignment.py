"""PyTorch vs ORT alignment: the metrics, the saved inputs, every route, and block-level divergence."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

import ops  # noqa: F401  (loads the op library)
from ops.alignment.check import AlignmentError, align_model_file, check_alignment, load_input, save_inputs
from ops.alignment.layers import block_output_names, with_extra_outputs
from ops.alignment.metrics import compare
from ops.model import ModelConfig, build_model, example_input
from ops.onnx.export import export_model
from ops.onnx.routes import ROUTES
from ops.reference import ALIGNMENT_TOLERANCES, MODEL_ALIGNMENT_TOLERANCE, Tolerance

CONFIG = ModelConfig(d_model=32, heads=2, layers=3)


# --- metrics ---------------------------------------------------------------------------


def test_compare_reports_the_errors_it_sees(generator):
    # |reference| >= 3 > atol/rtol = 1, so every element counts for max rel
    # (elements below atol/rtol are excluded from it by design).
    reference = np.abs(torch.randn(4, 50, generator=generator, dtype=torch.float64).numpy()) + 3.0
    tol = Tolerance(1e-6, 1e-6, "test", min_cosine=1 - 1e-12)
    same = compare(reference.copy(), reference, tol)
    assert same.passed and same.max_abs == 0.0 and same.max_rel == 0.0 and same.cosine == pytest.approx(1.0)
    off = reference.copy()
    off[2, 7] += 1e-3
    result = compare(off, reference, tol)
    assert not result.passed and not result.within
    assert result.max_abs == pytest.approx(1e-3, rel=1e-9)
    assert result.max_rel == pytest.approx(1e-3 / abs(reference[2, 7]), rel=1e-9)
    expected_cos = off.ravel() @ reference.ravel() / (np.linalg.norm(off) * np.linalg.norm(reference))
    assert result.cosine == pytest.approx(expected_cos, abs=1e-15)


def test_compare_fails_on_nan_direction_and_shape():
    tol = ALIGNMENT_TOLERANCES[torch.float32]
    reference = np.linspace(-2, 2, 64, dtype=np.float32)
    with_nan = reference.copy()
    with_nan[5] = np.nan
    assert not compare(with_nan, reference, tol).passed
    # Within atol elementwise, but pointing elsewhere: the cosine floor catches it.
    tiny = np.full(8, 1e-6)
    assert not compare(-tiny, tiny, Tolerance(0.0, 1e-5, "", min_cosine=0.99)).passed
    # Relative error ignores references below atol/rtol (noise), not above.
    near_zero = np.array([1e-9, 1.0])
    assert compare(near_zero + [1e-7, 0], near_zero, tol).max_rel == 0.0
    with pytest.raises(ValueError, match="shapes differ"):
        compare(reference[:3], reference, tol)


# --- saved inputs ------------------------------------------------------------------------


def test_inputs_are_saved_reproducible_and_realistic(tmp_path):
    files = save_inputs(tmp_path, "op", 97, "float16", [(2, 3), (1, 1)], seed=7)
    again = save_inputs(tmp_path / "again", "op", 97, "float16", [(2, 3), (1, 1)], seed=7)
    for a, b in zip(files, again, strict=True):
        x = load_input(a)
        assert x.dtype == np.float16 and x.shape[-1] == 97
        np.testing.assert_array_equal(x, load_input(b))
    big = load_input(files[0])
    assert not np.allclose(big, 0) and not np.allclose(big, 1) and len(np.unique(big)) > 100
    assert not np.array_equal(load_input(save_inputs(tmp_path, "op", 97, "float16", [(2, 3)], seed=8)[0]), big)


# --- every route --------------------------------------------------------------------------


def test_every_route_aligns_at_op_level(tmp_path, capsys):
    # The fast twin of the test below: every route's op-level cases, no model export.
    report = check_alignment(
        "all", tmp_path, dtypes=("float32",), op_hidden_sizes=(127,), op_shapes=((3, 5),), model_shapes=()
    )
    assert len(report.cases) == len(ROUTES) and not report.failures
    for case in report.cases:
        assert case.level == "op" and case.result.finite and case.result.cosine > 0.999999
        if case.route == "custom":
            assert case.result.max_abs == 0.0, case  # the same kernel core on both sides
    printed = capsys.readouterr().out
    assert all(f"route {name}" in printed for name in ROUTES)


@pytest.mark.slow  # three model exports and the layer-by-layer comparison: about 25 s on 2 cores
def test_every_route_aligns_on_op_and_model_with_layers(tmp_path, capsys):
    report = check_alignment(
        "all",
        tmp_path,
        layers=True,
        dtypes=("float32", "float16"),
        op_hidden_sizes=(127,),
        op_shapes=((1, 1), (3, 5)),
        model_shapes=((2, 3),),
    )
    # per route: 2 dtypes x 1 hidden x 2 shapes op cases, 1 model case, 2 block cases (MODEL_CONFIG has 2 layers)
    assert len(report.cases) == len(ROUTES) * (4 + 1 + 2)
    assert not report.failures
    assert report.first_divergent_block == {name: "" for name in ROUTES}
    for case in report.cases:
        assert case.result.finite and case.result.cosine > 0.999999 and case.input_file.exists()
        if case.route == "custom" and case.level == "op" and case.dtype == "float32":
            # Same kernel core on both sides: bit for bit. (Not asserted for float16: there
            # the core's 4-row block path and its single-row path differ by an ulp on some
            # small values, so the result depends on how an adapter splits the rows.)
            assert case.result.max_abs == 0.0, case
    printed = capsys.readouterr().out
    for header in ("max abs", "max rel", "1 - cosine", "route standard", "route opset23", "route custom"):
        assert header in printed
    assert printed.count("no block diverges beyond tolerance") == len(ROUTES)


def test_float64_standard_route_shows_ort_fusion_epsilon(tmp_path):
    """The float64 tolerance sees what float32 cannot: ORT's fusion swaps eps (see test_export.py)."""
    args = {"dtypes": ("float64",), "op_hidden_sizes": (64,), "op_shapes": ((2, 3),), "model_shapes": (), "echo": False}
    with pytest.raises(AlignmentError, match=r"standard op float64 h=64 2x3(.|\n)*known cause for standard/float64"):
        check_alignment("standard", tmp_path, optimization="all", **args)
    report = check_alignment("standard", tmp_path, optimization="basic", **args)
    assert report.cases[0].result.max_abs < 1e-13


def test_bad_dtype_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="--dtype must be a comma list of float32, float16, float64"):
        check_alignment("standard", tmp_path, dtypes=("int8",), echo=False)


# --- block by block -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def layered(tmp_path_factory):
    """A 3-block model exported by the standard route, and inputs saved for it."""
    out = tmp_path_factory.mktemp("layers")
    model = build_model("fused", seed=9, config=CONFIG)
    result = export_model(model, example_input(2, 8, CONFIG.d_model), "standard", out / "model.onnx")
    files = save_inputs(out, "model", CONFIG.d_model, "float32", [(2, 5), (1, 9)], seed=1)
    return model, onnx.load(result.path), files


def test_block_outputs_are_the_next_norms_inputs(layered):
    model, onnx_model, files = layered
    names = block_output_names(onnx_model, CONFIG.layers)
    assert len(names) == CONFIG.layers == len(set(names))
    edited = with_extra_outputs(onnx_model, names)
    assert [o.name for o in edited.graph.output] == ["y", *names]
    assert [o.name for o in onnx_model.graph.output] == ["y"], "the original model must not change"


def test_layers_align_when_nothing_is_wrong(layered):
    model, onnx_model, files = layered
    cases, first = align_model_file(ROUTES["standard"], onnx_model, model, files, layers=True)
    assert first == "" and all(c.result.passed for c in cases)
    assert [c.level for c in cases[: 1 + CONFIG.layers]] == ["model", "block 0", "block 1", "block 2"]


@pytest.mark.parametrize("block", [0, 1])
def test_layers_name_the_first_divergent_block(layered, block):
    """Break one norm inside block ``block`` (its bias, in the ONNX file only): that block and all
    after it diverge, the blocks before it do not, and the report names that block."""
    model, onnx_model, files = layered
    broken = onnx.ModelProto()
    broken.CopyFrom(onnx_model)
    name = f"blocks.{block}.norm2.bias"
    init = next(i for i in broken.graph.initializer if i.name == name)
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) + np.float32(0.05), name))
    cases, first = align_model_file(ROUTES["standard"], broken, model, files, layers=True)
    assert first == f"block {block}"
    by_level = {c.level: c for c in cases[: 1 + CONFIG.layers]}
    for earlier in range(block):
        assert by_level[f"block {earlier}"].result.passed
    assert not by_level[f"block {block}"].result.passed and not by_level["model"].result.passed
    assert by_level[f"block {block}"].result.max_abs > 10 * MODEL_ALIGNMENT_TOLERANCE.atol
