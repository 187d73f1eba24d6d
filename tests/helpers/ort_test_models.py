"""Tiny ONNX models with myops::fused_norm nodes, built with onnx.helper.

Independent of the exporter on purpose: these tests check the ORT library
itself, with graphs whose every field is written out here.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

# ORT 1.31 reads IR version <= 13; onnx 1.23's helper writes 14 by default.
IR_VERSION = 10
OPSET_IMPORTS = [helper.make_opsetid("", 17), helper.make_opsetid("myops", 1)]

ONNX_TYPES = {
    "float32": TensorProto.FLOAT,
    "float64": TensorProto.DOUBLE,
    "float16": TensorProto.FLOAT16,
    "bfloat16": TensorProto.BFLOAT16,
    "int32": TensorProto.INT32,
}

Shape = list | None  # dims (int or symbolic name), or None for an unknown shape


def fused_norm_node(inputs: list[str], output: str, epsilon: float | None, **extra_attributes) -> onnx.NodeProto:
    attributes = dict(extra_attributes)
    if epsilon is not None:
        attributes["epsilon"] = float(epsilon)
    return helper.make_node("fused_norm", inputs, [output], domain="myops", **attributes)


def single_node_model(
    dtype: str = "float32",
    epsilon: float | None = 1e-5,
    x_shape: Shape = ("batch", "seq", "hidden"),
    weight_shape: Shape = ("hidden",),
    bias_shape: Shape = ("hidden",),
    weight_dtype: str | None = None,
    bias_dtype: str | None = None,
    y_dtype: str | None = None,
) -> bytes:
    """X, weight, bias -> fused_norm -> Y, with Y's shape left for ORT to infer."""

    def info(name: str, dt: str, shape: Shape) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, ONNX_TYPES[dt], None if shape is None else list(shape))

    graph = helper.make_graph(
        [fused_norm_node(["X", "weight", "bias"], "Y", epsilon)],
        "fused_norm_single",
        [
            info("X", dtype, x_shape),
            info("weight", weight_dtype or dtype, weight_shape),
            info("bias", bias_dtype or dtype, bias_shape),
        ],
        [info("Y", y_dtype or dtype, None)],
    )
    return helper.make_model(graph, opset_imports=OPSET_IMPORTS, ir_version=IR_VERSION).SerializeToString()


def single_add_norm_model(dtype: str = "float32", epsilon: float = 1e-5) -> bytes:
    """X, residual, weight, bias -> fused_add_norm -> Y, S (S = X + residual), with the outputs' shapes left for
    ORT to infer."""
    info = {
        name: helper.make_tensor_value_info(name, ONNX_TYPES[dtype], shape)
        for name, shape in (("X", ["rows", "hidden"]), ("residual", ["rows", "hidden"]), ("weight", ["hidden"]))
    }
    info["bias"] = helper.make_tensor_value_info("bias", ONNX_TYPES[dtype], ["hidden"])
    node = helper.make_node(
        "fused_add_norm", ["X", "residual", "weight", "bias"], ["Y", "S"], domain="myops", epsilon=float(epsilon)
    )
    outputs = [helper.make_tensor_value_info(name, ONNX_TYPES[dtype], None) for name in ("Y", "S")]
    graph = helper.make_graph([node], "fused_add_norm_single", list(info.values()), outputs)
    return helper.make_model(graph, opset_imports=OPSET_IMPORTS, ir_version=IR_VERSION).SerializeToString()


def two_epsilon_model(hidden: int, eps_a: float, eps_b: float) -> bytes:
    """One input, two fused_norm nodes that differ only in epsilon. Each node also
    carries a decoy float attribute that sorts before 'epsilon', so a kernel
    reading attributes by position would pick the decoy."""
    graph = helper.make_graph(
        [
            fused_norm_node(["X", "weight", "bias"], "Y_a", eps_a, alpha=0.25),
            fused_norm_node(["X", "weight", "bias"], "Y_b", eps_b, alpha=0.25),
        ],
        "fused_norm_two_eps",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, ["rows", hidden]),
            helper.make_tensor_value_info("weight", TensorProto.FLOAT, [hidden]),
            helper.make_tensor_value_info("bias", TensorProto.FLOAT, [hidden]),
        ],
        [
            helper.make_tensor_value_info("Y_a", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("Y_b", TensorProto.FLOAT, None),
        ],
    )
    return helper.make_model(graph, opset_imports=OPSET_IMPORTS, ir_version=IR_VERSION).SerializeToString()


def chained_model(hidden: int) -> bytes:
    """X -> fused_norm -> T -> fused_norm -> Y: Y's shape is known only if ORT
    can infer T's and then Y's from the op."""
    graph = helper.make_graph(
        [fused_norm_node(["X", "weight", "bias"], "T", 1e-5), fused_norm_node(["T", "weight", "bias"], "Y", 1e-5)],
        "fused_norm_chain",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", "seq", hidden]),
            helper.make_tensor_value_info("weight", TensorProto.FLOAT, [hidden]),
            helper.make_tensor_value_info("bias", TensorProto.FLOAT, [hidden]),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=OPSET_IMPORTS, ir_version=IR_VERSION).SerializeToString()


def attribute_eps(eps: float) -> float:
    """eps as the float32 an ONNX float attribute stores: the value the kernel really uses.

    For rows with mean(x^2) near eps, 1e-6 vs float32(1e-6) differs by ~1e-9
    relative, far above float64 rounding, so the reference must use it too.
    """
    return float(np.float32(eps))


# --- bfloat16 as raw uint16 (numpy has no bfloat16) ---------------------------


def to_bfloat16_bits(a: np.ndarray) -> np.ndarray:
    """float -> bfloat16 bit patterns, round to nearest even (inputs here are finite)."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def from_bfloat16_bits(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)
