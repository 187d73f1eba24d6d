"""An ONNX operator schema for ``myops::fused_norm``, for onnx's checker and shape inference.

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
from ops.onnx.routes import CUSTOM_DOMAIN, CUSTOM_DOMAIN_VERSION, CUSTOM_OP_TYPE


def _infer(ctx) -> None:
    x = ctx.get_input_type(0)
    x_dims = x.tensor_type.shape.dim if x.tensor_type.HasField("shape") else None
    if x_dims is not None and len(x_dims) == 0:
        raise InferenceError(f"{CUSTOM_OP_TYPE}: X must have at least 1 dimension (the normalised last one)")
    for index, name in ((1, "weight"), (2, "bias")):
        param = ctx.get_input_type(index)
        if param.tensor_type.elem_type != x.tensor_type.elem_type:
            raise InferenceError(f"{CUSTOM_OP_TYPE}: {name} must have X's dtype")
        if not param.tensor_type.HasField("shape"):
            continue
        dims = param.tensor_type.shape.dim
        if len(dims) != 1:
            raise InferenceError(f"{CUSTOM_OP_TYPE}: {name} must be 1-D, got rank {len(dims)}")
        last = x_dims[-1] if x_dims else None
        if (
            last is not None
            and last.HasField("dim_value")
            and dims[0].HasField("dim_value")
            and dims[0].dim_value != last.dim_value
        ):
            raise InferenceError(
                f"{CUSTOM_OP_TYPE}: {name} has length {dims[0].dim_value}, X's last dim is {last.dim_value}"
            )
    ctx.set_output_type(0, x)


def _schema() -> defs.OpSchema:
    param = defs.OpSchema.FormalParameter
    schema = defs.OpSchema(
        CUSTOM_OP_TYPE,
        CUSTOM_DOMAIN,
        CUSTOM_DOMAIN_VERSION,
        "Y = X * rsqrt(mean(X^2, last axis) + epsilon) * weight + bias",
        inputs=[
            param("X", "T", "input, normalised over its last dim"),
            param("weight", "T", "[hidden] scale"),
            param("bias", "T", "[hidden] shift"),
        ],
        outputs=[param("Y", "T", "X's shape and dtype")],
        type_constraints=[("T", [d.ort for d in DTYPES], "floating-point tensors")],
        attributes=[
            defs.OpSchema.Attribute("epsilon", defs.OpSchema.AttrType.FLOAT, "added to the mean square", required=True)
        ],
    )
    schema.set_type_and_shape_inference_function(_infer)
    return schema


def register_custom_schema() -> None:
    """Register the schema with onnx once per process (idempotent)."""
    if defs.has(CUSTOM_OP_TYPE, CUSTOM_DOMAIN):
        return
    defs.register_schema(_schema())
