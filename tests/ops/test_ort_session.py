"""ops.ort.session: threads, optimisation levels, optimised-model output,
provider checks, custom-op registration, and IO binding with reused buffers."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ops
from ops.ort import session as ort_session
from ops.ort.session import (
    CustomOpsNotRegisteredError,
    IOBoundRunner,
    OrtConfig,
    ProviderUnavailableError,
    create_session,
    physical_cores,
)
from ops.reference import REFERENCE, reference_norm
from tests.helpers.ort_test_models import IR_VERSION, attribute_eps, single_node_model


def norm_pattern_model(hidden: int = 32) -> bytes:
    """RMS norm in the standard-op pattern ORT fuses at "extended" (see FACTS.md),
    plus a constant sub-expression (two initializers added) that "basic" folds."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array(1e-6, np.float32), "eps"),
        numpy_helper.from_array((1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32), "scale"),
        numpy_helper.from_array((0.01 * rng.standard_normal(hidden)).astype(np.float32), "bias_a"),
        numpy_helper.from_array((0.01 * rng.standard_normal(hidden)).astype(np.float32), "bias_b"),
    ]
    nodes = [
        helper.make_node("Pow", ["X", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1),
        helper.make_node("Add", ["ms", "eps"], ["ms_eps"]),
        helper.make_node("Sqrt", ["ms_eps"], ["rms"]),
        helper.make_node("Div", ["X", "rms"], ["normed"]),
        helper.make_node("Mul", ["normed", "scale"], ["scaled"]),
        helper.make_node("Add", ["bias_a", "bias_b"], ["bias"]),  # constant: folded from "basic" on
        helper.make_node("Add", ["scaled", "bias"], ["Y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "norm_pattern",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", "seq", hidden])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", "seq", hidden])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)
    return model.SerializeToString()


def op_types(path) -> list[str]:
    return [node.op_type for node in onnx.load(str(path)).graph.node]


# --- threads -------------------------------------------------------------------


def test_physical_cores_counts_each_core_once():
    cores = physical_cores()
    logical = len(os.sched_getaffinity(0))
    assert 1 <= cores <= logical
    siblings = {
        open(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list").read().strip()
        for c in os.sched_getaffinity(0)
        if os.path.exists(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list")
    }
    if siblings:  # one sibling group per physical core
        assert cores == len(siblings)


@pytest.mark.parametrize(
    "cores,instances,threads,expected",
    [(8, 1, None, 8), (8, 3, None, 2), (8, 8, None, 1), (8, 2, 4, 4), (2, 1, None, 2), (2, 2, None, 1)],
)
def test_thread_rule(monkeypatch, cores, instances, threads, expected):
    monkeypatch.setattr(ort_session, "physical_cores", lambda: cores)
    assert ort_session.intra_op_threads(OrtConfig(threads=threads, instances=instances)) == expected


@pytest.mark.parametrize(
    "cores,instances,threads,message",
    [
        (8, 3, 3, "3 instance.* x 3 thread.* = 9 threads exceeds the 8 physical cores"),
        (2, 3, None, "3 instance.* x 1 thread.* = 3 threads exceeds the 2 physical cores"),
        (8, 1, 0, "threads must be >= 1"),
        (8, 0, None, "instances must be >= 1"),
    ],
)
def test_thread_rule_refuses_oversubscription(monkeypatch, cores, instances, threads, message):
    monkeypatch.setattr(ort_session, "physical_cores", lambda: cores)
    with pytest.raises(ValueError, match=message):
        ort_session.intra_op_threads(OrtConfig(threads=threads, instances=instances))


def test_session_uses_the_chosen_threads():
    session = create_session(norm_pattern_model(), OrtConfig(register_custom_ops=False))
    options = session.get_session_options()
    assert options.intra_op_num_threads == physical_cores()
    assert options.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL


# --- optimisation levels and the optimised model -------------------------------------


@pytest.mark.parametrize(
    "level,ort_level",
    [
        ("disable", ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
        ("basic", ort.GraphOptimizationLevel.ORT_ENABLE_BASIC),
        ("extended", ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED),
        ("all", ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
    ],
)
def test_optimization_levels(tmp_path, level, ort_level):
    target = tmp_path / "sub" / f"{level}.onnx"
    session = create_session(
        norm_pattern_model(), OrtConfig(optimization=level, register_custom_ops=False, optimized_model_path=target)
    )
    assert session.get_session_options().graph_optimization_level == ort_level
    # The written graph shows what each level did.
    types = op_types(target)
    if level == "disable":
        assert types.count("Add") == 3 and "SimplifiedLayerNormalization" not in types
    elif level == "basic":  # constant folding, no fusion
        assert types.count("Add") == 2 and "Pow" in types and "SimplifiedLayerNormalization" not in types
    else:  # extended and all: the norm pattern is one fused node
        assert types.count("SimplifiedLayerNormalization") == 1 and "Pow" not in types
    # Written through a temporary file and renamed: nothing else is left behind.
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]
    x = np.random.default_rng(1).standard_normal((2, 3, 32)).astype(np.float32)
    assert session.run(None, {"X": x})[0].shape == (2, 3, 32)


def test_unknown_optimization_level_is_refused():
    with pytest.raises(ValueError, match="optimization must be one of disable, basic, extended, all"):
        create_session(norm_pattern_model(), OrtConfig(optimization="max", register_custom_ops=False))


def test_model_from_path(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(norm_pattern_model())
    assert create_session(path, OrtConfig(register_custom_ops=False)).get_inputs()[0].name == "X"


# --- providers -----------------------------------------------------------------------


def test_cuda_request_raises_when_cuda_cannot_run():
    from env.builder.ort_runtime import cuda_provider_status

    usable, reason = cuda_provider_status()
    if usable:
        pytest.skip(f"CUDA works on this machine ({reason}); the refusal cannot be observed")
    with pytest.raises(ProviderUnavailableError, match="CUDAExecutionProvider") as raised:
        create_session(norm_pattern_model(), OrtConfig(provider="cuda", register_custom_ops=False))
    message = str(raised.value)
    # What is available and why CUDA is not.
    assert "CPUExecutionProvider" in message and reason.split(": ")[-1] in message


def test_unknown_provider_is_refused():
    with pytest.raises(ValueError, match="provider must be one of cpu, cuda"):
        create_session(norm_pattern_model(), OrtConfig(provider="tpu", register_custom_ops=False))


# --- custom ops -----------------------------------------------------------------------


def test_custom_op_session_runs(generator):
    session = create_session(single_node_model("float32", 1e-5))
    x = np.random.default_rng(2).standard_normal((2, 5, 16)).astype(np.float32)
    w, b = np.full(16, 1.1, np.float32), np.full(16, 0.02, np.float32)
    (y,) = session.run(None, {"X": x, "weight": w, "bias": b})
    np.testing.assert_allclose(y, reference_norm(x, w, b, attribute_eps(1e-5)), **REFERENCE.fp32.as_kwargs())


def test_custom_op_without_registration_says_how_to_fix():
    with pytest.raises(
        CustomOpsNotRegisteredError,
        match=r"custom op myops::fused_norm, which is not registered: .*register_custom_ops=True",
    ):
        create_session(single_node_model("float32"), OrtConfig(register_custom_ops=False))


def test_missing_library_gives_library_not_built(tmp_path, monkeypatch):
    monkeypatch.delenv("FUSEDBENCH_ORT_LIBRARY", raising=False)
    monkeypatch.setenv("FUSEDBENCH_BUILD_DIR", str(tmp_path))  # no toolchain record there
    with pytest.raises(ops.LibraryNotBuiltError, match="invoke build"):
        create_session(single_node_model("float32"))


# --- IO binding -------------------------------------------------------------------------


def test_io_bound_runner_reuses_output_buffers():
    session = create_session(single_node_model("float32", 1e-5))
    runner = IOBoundRunner(session)
    rng = np.random.default_rng(3)
    w, b = (1 + 0.1 * rng.standard_normal(64)).astype(np.float32), (0.05 * rng.standard_normal(64)).astype(np.float32)

    def feeds(shape):
        return {"X": (rng.standard_normal(shape) * 2).astype(np.float32), "weight": w, "bias": b}

    first_feeds = feeds((2, 7, 64))
    first = runner.run(first_feeds)
    first_ptr = first[0].ctypes.data
    assert first_ptr % 64 == 0  # at a cache line: the kernel's vector stores do not straddle two
    np.testing.assert_allclose(
        first[0], reference_norm(first_feeds["X"], w, b, attribute_eps(1e-5)), **REFERENCE.fp32.as_kwargs()
    )

    first[0][...] = np.nan  # anything ORT does not overwrite would stay NaN
    second_feeds = feeds((2, 7, 64))
    second = runner.run(second_feeds)
    assert second[0] is first[0] and second[0].ctypes.data == first_ptr
    np.testing.assert_allclose(
        second[0], reference_norm(second_feeds["X"], w, b, attribute_eps(1e-5)), **REFERENCE.fp32.as_kwargs()
    )

    # New input shapes: new buffers of the new shape.
    third_feeds = feeds((3, 5, 64))
    third = runner.run(third_feeds)
    assert third[0].shape == (3, 5, 64) and third[0] is not first[0] and third[0].ctypes.data % 64 == 0
    np.testing.assert_allclose(
        third[0], reference_norm(third_feeds["X"], w, b, attribute_eps(1e-5)), **REFERENCE.fp32.as_kwargs()
    )
    fourth = runner.run(feeds((3, 5, 64)))
    assert fourth[0] is third[0]


def test_io_bound_runner_sees_inputs_refilled_in_place_and_new_arrays():
    session = create_session(single_node_model("float32", 1e-5))
    runner = IOBoundRunner(session)
    rng = np.random.default_rng(4)
    w, b = (1 + 0.1 * rng.standard_normal(32)).astype(np.float32), (0.05 * rng.standard_normal(32)).astype(np.float32)
    feeds = {"X": rng.standard_normal((4, 3, 32)).astype(np.float32), "weight": w, "bias": b}
    runner.run(feeds)
    # Same array objects, new contents: the binding reads them where they lie.
    feeds["X"][...] = 3 * rng.standard_normal((4, 3, 32))
    np.testing.assert_allclose(
        runner.run(feeds)[0], reference_norm(feeds["X"], w, b, attribute_eps(1e-5)), **REFERENCE.fp32.as_kwargs()
    )
    # A new array of the same shape, and a non-contiguous one: rebound.
    for x in (
        rng.standard_normal((4, 3, 32)).astype(np.float32),
        rng.standard_normal((4, 3, 64)).astype(np.float32)[..., ::2],
    ):
        y = runner.run({"X": x, "weight": w, "bias": b})[0]
        np.testing.assert_allclose(y, reference_norm(x, w, b, attribute_eps(1e-5)), **REFERENCE.fp32.as_kwargs())
