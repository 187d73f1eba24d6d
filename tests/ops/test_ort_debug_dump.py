"""The ORT custom op's debug dump: off by default, one folder per call when on, replay agrees with the torch op."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
import torch

from ops.ort.dump_replay import DumpError, replay
from ops.ort.session import OrtConfig, create_session, session_options
from ops.reference import make_inputs
from tests.helpers.ort_test_models import single_node_model, two_epsilon_model

DUMP_KEY = "myops.fused_norm.dump_dir"


def dumping_session(model: bytes, folder) -> ort.InferenceSession:
    options = session_options(OrtConfig(threads=1))
    options.add_session_config_entry(DUMP_KEY, str(folder))
    return ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_each_call_is_dumped_and_replays_within_tolerance(tmp_path, generator, dtype):
    name = str(dtype).removeprefix("torch.")
    session = dumping_session(single_node_model(name, epsilon=1e-5), tmp_path)
    sent = []
    for shape in ((2, 5, 64), (3, 7, 64), (1, 1, 64)):
        x, w, b = make_inputs(shape, dtype, generator)
        (y,) = session.run(None, {"X": x.numpy(), "weight": w.numpy(), "bias": b.numpy()})
        sent.append((x.numpy(), y))
    results = replay(tmp_path)
    assert [r.call for r in results] == [1, 2, 3]
    assert all(r.agrees for r in results) and all(r.dtype == name for r in results)
    folders = sorted(tmp_path.glob("*/call-*"))
    for folder, (x, y), result in zip(folders, sent, results, strict=True):
        np.testing.assert_array_equal(np.load(folder / "x.npy"), x)
        np.testing.assert_array_equal(np.load(folder / "y.npy"), y)  # what ORT returned, bit for bit
        assert float(np.load(folder / "epsilon.npy")) == pytest.approx(1e-5, rel=1e-7)
        meta = json.loads((folder / "meta.json").read_text())
        assert meta["x_shape"] == list(x.shape) and result.shape == x.shape
    assert not list(tmp_path.glob("*/.call-*"))  # no half-written call left behind


def test_replay_finds_a_corrupted_output(tmp_path, generator):
    session = dumping_session(single_node_model("float32", epsilon=1e-5), tmp_path)
    x, w, b = make_inputs((4, 8, 32), torch.float32, generator)
    for _ in range(2):
        session.run(None, {"X": x.numpy(), "weight": w.numpy(), "bias": b.numpy()})
    second = sorted(tmp_path.glob("*/call-*"))[1] / "y.npy"
    y = np.load(second)
    y[1, 2, 3] += 1e-3 * (1 + abs(y[1, 2, 3]))
    np.save(second, y)
    results = replay(tmp_path)
    assert [r.agrees for r in results] == [True, False]
    assert results[1].outside == 1


def test_two_nodes_get_their_own_folders(tmp_path, generator):
    session = dumping_session(two_epsilon_model(16, 1e-6, 0.5), tmp_path)
    x, w, b = make_inputs((3, 16), torch.float32, generator)
    session.run(None, {"X": x.numpy(), "weight": w.numpy(), "bias": b.numpy()})
    nodes = sorted(p.name for p in tmp_path.iterdir())
    assert len(nodes) == 2, nodes  # unnamed nodes still get a folder each (kernel serial)
    results = replay(tmp_path)
    assert sorted(r.epsilon for r in results) == pytest.approx([1e-6, 0.5])
    assert all(r.agrees for r in results)


def test_off_by_default_writes_nothing(tmp_path, generator, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FUSEDBENCH_ORT_DUMP_DIR", raising=False)
    session = create_session(single_node_model("float32"), OrtConfig(threads=1))
    x, w, b = make_inputs((2, 3, 8), torch.float32, generator)
    session.run(None, {"X": x.numpy(), "weight": w.numpy(), "bias": b.numpy()})
    assert list(tmp_path.iterdir()) == []


def test_environment_variable_turns_it_on(tmp_path, generator, monkeypatch):
    monkeypatch.setenv("FUSEDBENCH_ORT_DUMP_DIR", str(tmp_path))
    session = create_session(single_node_model("float32"), OrtConfig(threads=1))
    x, w, b = make_inputs((2, 3, 8), torch.float32, generator)
    session.run(None, {"X": x.numpy(), "weight": w.numpy(), "bias": b.numpy()})
    assert [r.agrees for r in replay(tmp_path)] == [True]


def test_replay_of_a_folder_without_calls_says_so(tmp_path):
    with pytest.raises(DumpError, match="holds no dumped calls"):
        replay(tmp_path)


def test_the_exported_model_dumps_one_folder_per_norm_node(tmp_path_factory, tmp_path):
    """The custom route's model: every fused_norm node's calls are dumped under its own name and replay agrees."""
    import onnx

    from bench.serve.models import make_bank
    from tests.helpers.serve_models import SMALL, small_model_files

    path = small_model_files(tmp_path_factory)["custom"]
    node_names = [n.name for n in onnx.load(path).graph.node if n.op_type == "fused_norm"]
    assert len(node_names) == 2 * SMALL.config.layers + 1
    options = session_options(OrtConfig(threads=1))
    options.add_session_config_entry(DUMP_KEY, str(tmp_path))
    session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    bank = make_bank(SMALL, size=2)
    for x in bank.inputs:
        (y,) = session.run(None, {"x": x})
    folders = sorted(p.name for p in tmp_path.iterdir())
    assert sorted(f.split("__p")[0] for f in folders) == sorted(
        n.replace("/", "_").replace(":", "_") for n in node_names
    )
    results = replay(tmp_path)
    assert len(results) == 2 * len(node_names) and all(r.agrees for r in results)


def test_a_fused_add_norm_call_dumps_its_residual_and_sum_and_replays(tmp_path, generator):
    from ops.model import build_norm
    from ops.onnx.export import export_model

    norm = build_norm(48, "fused_add", seed=2)
    x, residual = (make_inputs((2, 3, 48), torch.float32, generator)[0] for _ in range(2))
    exported = export_model(norm, (x, residual), "custom", tmp_path / "add_norm.onnx")
    session = dumping_session(exported.path.read_bytes(), tmp_path / "dump")
    y, s = session.run(None, {"x": x.numpy(), "residual": residual.numpy()})
    (folder,) = sorted((tmp_path / "dump").glob("*/call-*"))
    np.testing.assert_array_equal(np.load(folder / "residual.npy"), residual.numpy())
    np.testing.assert_array_equal(np.load(folder / "s.npy"), s)
    assert json.loads((folder / "meta.json").read_text())["op"] == "fused_add_norm"
    (result,) = replay(tmp_path / "dump")
    assert result.op == "fused_add_norm" and result.agrees and result.elements == 2 * x.numel()
    corrupted = s.copy()
    corrupted[1, 2, 3] += 1.0
    np.save(folder / "s.npy", corrupted)
    (result,) = replay(tmp_path / "dump")
    assert not result.agrees and result.outside == 1  # a wrong sum is caught, not only a wrong norm
