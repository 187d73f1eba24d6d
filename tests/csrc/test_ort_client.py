"""The C++ client (csrc/ort/examples/ort_client.cc): the custom-route model served from C++ threads is correct."""

from __future__ import annotations

import subprocess

import onnx
import pytest

from env.builder.ort_client import build_ort_client
from ops._library import ort_library_path
from tests.helpers.serve_models import small_model_files


@pytest.fixture(scope="module")
def client():
    return build_ort_client()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return small_model_files(tmp_path_factory)


def run_client(client, custom, reference, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(client), str(custom), str(reference), str(ort_library_path()), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_cpp_threads_on_one_session_match_the_standard_route(client, files):
    result = run_client(client, files["custom"], files["standard"], 6, 150, 8)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "6 threads x 150 requests on one session" in result.stdout
    assert "0 mismatches, 0 errors" in result.stdout


def test_the_client_reports_a_wrong_model(client, files, tmp_path):
    # One norm's epsilon changed by orders of magnitude: the client must see its answers differ from the reference.
    model = onnx.load(files["custom"])
    node = next(n for n in model.graph.node if n.op_type == "fused_norm")
    next(a for a in node.attribute if a.name == "epsilon").f = 10.0
    wrong = tmp_path / "wrong-eps.onnx"
    onnx.save(model, wrong)
    result = run_client(client, wrong, files["standard"], 2, 10, 8)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "20 mismatches" in result.stdout


def test_the_client_names_a_missing_library(client, files, tmp_path):
    result = subprocess.run(
        [str(client), str(files["custom"]), str(files["standard"]), str(tmp_path / "missing.so")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert "missing.so" in result.stderr


@pytest.mark.slow  # two exports of the folded model: about 10 s on 2 cores
def test_cpp_threads_serve_the_folded_model_with_its_two_output_nodes(client, tmp_path):
    # The model with its residual adds folded into the norms: one myops::fused_add_norm node per residual norm,
    # which the same library serves; its answers must match the standard route's.
    from ops.model import ModelConfig, build_model, example_input
    from ops.onnx.export import export_model

    config = ModelConfig(d_model=64, heads=2, layers=2)
    model = build_model("fused_add", config, seed=4)
    x = example_input(2, 8, config.d_model)
    custom = export_model(model, x, "custom", tmp_path / "custom.onnx")
    standard = export_model(model, x, "standard", tmp_path / "standard.onnx")
    assert custom.report.node_counts[("myops", "fused_add_norm")] == 2 * config.layers
    result = run_client(client, custom.path, standard.path, 4, 50, 8)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 mismatches, 0 errors" in result.stdout
