"""ONNX operator schemas for ``myops::fused_norm`` and ``myops::fused_add_norm``, for onnx's checker and inference.

onnx knows nothing of the ``myops`` domain, and its strict shape inference
does not fail on an unknown op: it silently stops there, so every value after
the first custom node goes unchecked. Registering the schema below (in this
process's onnx registry only; the .onnx file is unchanged and ONNX Runtime
uses its own registry) lets the checker validate the node's arity, types and
attribute, and lets inference carry ``Y = X's type and shape`` through the
rest of the graph, checking weight/bias against X's last dim on the way.
The post-export checks also compare the output shape the exporter recorded
with X's, so the file is not judged by this schema alone.

The contract written here is the one the torch schema (csrc/torch) and the
ORT custom-op library (csrc/ort) implement.
"""

from __future__ import annotations

from onnx import defs
from onnx.shape_inference import InferenceError

from ops.dtypes import DTYPES
from ops.onnx.routes import CUSTOM_ADD_OP_TYPE, CUSTOM_DOMAIN, CUSTOM_DOMAIN_VERSION, CUSTOM_OP_TYPE


def _inference(op: str, params: tuple[int, int], outputs: int):
    """Shape inference of a myops norm: X's rank and dtype, the [hidden] parameters at ``params``; every output
    gets X's type and shape (fused_add_norm's residual input too must have X's dtype)."""

    def infer(ctx) -> None:
        x = ctx.get_input_type(0)
        x_dims = x.tensor_type.shape.dim if x.tensor_type.HasField("shape") else None
        if x_dims is not None and len(x_dims) == 0:
            raise InferenceError(f"{op}: X must have at least 1 dimension (the normalised last one)")
        for index in range(1, params[0]):
            if ctx.get_input_type(index).tensor_type.elem_type != x.tensor_type.elem_type:
                raise InferenceError(f"{op}: residual must have X's dtype")
        for index, name in zip(params, ("weight", "bias"), strict=True):
            param = ctx.get_input_type(index)
            if param.tensor_type.elem_type != x.tensor_type.elem_type:
                raise InferenceError(f"{op}: {name} must have X's dtype")
            if not param.tensor_type.HasField("shape"):
                continue
            dims = param.tensor_type.shape.dim
            if len(dims) != 1:
                raise InferenceError(f"{op}: {name} must be 1-D, got rank {len(dims)}")
            last = x_dims[-1] if x_dims else None
            if (
                last is not None
                and last.HasField("dim_value")
                and dims[0].HasField("dim_value")
                and dims[0].dim_value != last.dim_value
            ):
                raise InferenceError(f"{op}: {name} has length {dims[0].dim_value}, X's last dim is {last.dim_value}")
        # A node with fewer outputs than the schema's fails the checker; inference types the ones it has.
        for index in range(min(outputs, ctx.get_num_outputs())):
            ctx.set_output_type(index, x)

    return infer


def _schema(op: str, doc: str, inputs: list[tuple[str, str]], outputs: list[tuple[str, str]]) -> defs.OpSchema:
    param = defs.OpSchema.FormalParameter
    schema = defs.OpSchema(
        op,
        CUSTOM_DOMAIN,
        CUSTOM_DOMAIN_VERSION,
        doc,
        inputs=[param(name, "T", text) for name, text in inputs],
        outputs=[param(name, "T", text) for name, text in outputs],
        type_constraints=[("T", [d.ort for d in DTYPES], "floating-point tensors")],
        attributes=[
            defs.OpSchema.Attribute("epsilon", defs.OpSchema.AttrType.FLOAT, "added to the mean square", required=True)
        ],
    )
    first_param = len(inputs) - 2
    schema.set_type_and_shape_inference_function(_inference(op, (first_param, first_param + 1), len(outputs)))
    return schema


def _schemas() -> list[defs.OpSchema]:
    x, weight, bias = (
        ("X", "input, normalised over its last dim"),
        ("weight", "[hidden] scale"),
        ("bias", "[hidden] shift"),
    )
    return [
        _schema(
            CUSTOM_OP_TYPE,
            "Y = X * rsqrt(mean(X^2, last axis) + epsilon) * weight + bias",
            [x, weight, bias],
            [("Y", "X's shape and dtype")],
        ),
        _schema(
            CUSTOM_ADD_OP_TYPE,
            "S = X + residual (rounded to the dtype); Y = fused_norm(S, weight, bias)",
            [("X", "input, added to residual"), ("residual", "X's shape and dtype"), weight, bias],
            [("Y", "the norm of S"), ("S", "X + residual: the residual stream carried on")],
        ),
    ]


def register_custom_schema() -> None:
    """Register the schemas with onnx once per process (idempotent)."""
    for schema in _schemas():
        if not defs.has(schema.name, CUSTOM_DOMAIN):
            defs.register_schema(schema)
