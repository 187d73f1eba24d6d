"""The three ways ``myops::fused_norm`` and ``myops::fused_add_norm`` become ONNX, and what each promises.

A route says which nodes one norm becomes and how each exporter makes them;
a norm called with a residual (``fused_add_norm``) becomes the same nodes
after an ``Add`` of x and the residual, whose output is the op's second
output (the residual stream), or one ``myops::fused_add_norm`` node with two
outputs in the ``custom`` route:

  * ``standard``: plain ONNX ops in exactly the pattern ONNX Runtime's
    SimplifiedLayerNormFusion recognises (Pow(x, 2) -> ReduceMean(last axis)
    -> Add(eps) -> Sqrt -> Div(x, .) -> Mul(weight)), then the bias Add. Any
    ONNX runtime runs it; ORT with graph optimisation on runs one
    SimplifiedLayerNormalization per norm. (x * rsqrt(.) or Mul(x, x) compute
    the same but do not fuse.) The Add in front of a residual norm is the
    pattern onnxruntime.transformers' SkipLayerNormalization fusion turns
    into SkipSimplifiedLayerNormalization (com.microsoft), whose fourth output
    is the sum; ORT's session optimiser (1.31) does not: its fusion handles
    LayerNormalization only, and only when the Add feeds nothing else.
  * ``opset23``: ONNX's own RMSNormalization (opset 23) plus the bias Add.
  * ``custom``: one opaque ``myops::fused_norm`` node; the runtime needs the
    custom-op library (csrc/ort), which runs the same kernel as the torch op.

Each route has a translation for the dynamo exporter (``custom_translation_table``)
and, except ``opset23``, a symbolic function for the deprecated TorchScript
exporter. The checks in ops/onnx/checks.py hold every export to the promise
written here (``norm_ops``, ``opset_imports``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import onnxscript
import torch
from onnxscript import FLOAT, ir
from onnxscript import opset18 as op18
from onnxscript import opset23 as op23
from torch.onnx import symbolic_helper

CUSTOM_DOMAIN = "myops"
CUSTOM_DOMAIN_VERSION = 1
CUSTOM_OP_TYPE = "fused_norm"
CUSTOM_ADD_OP_TYPE = "fused_add_norm"

# ONNX opset of the standard and custom files: the dynamo exporter's default
# and the newest the TorchScript exporter can write, so both exporters give
# the same graph.
DEFAULT_OPSET = 20

# Statistics precision (RMSNormalization's stash_type, an ONNX TensorProto
# dtype code), matching the kernel core: float for 16/32-bit types, double for
# float64.
_STASH_FLOAT, _STASH_DOUBLE = 1, 11


@dataclass(frozen=True)
class Route:
    name: str
    summary: str
    opset: int
    # (domain, op_type) of the nodes one norm becomes, in graph order
    # (Constant nodes aside); "" is the default ONNX domain.
    norm_ops: tuple[tuple[str, str], ...]
    # Every opset the file must import, and nothing else.
    opset_imports: dict[str, int]
    dynamo_translation: Callable
    torchscript_symbolic: Callable | None
    # The same for a norm called with a residual (myops::fused_add_norm).
    add_norm_ops: tuple[tuple[str, str], ...]
    add_dynamo_translation: Callable
    add_torchscript_symbolic: Callable | None
    torchscript_unavailable: str = ""

    @property
    def custom_domain(self) -> bool:
        return CUSTOM_DOMAIN in self.opset_imports


# --- dynamo exporter translations ---------------------------------------------
# The exporter builds its graph at opset 18 (torch's TORCHLIB_OPSET) and
# converts the finished model to the requested opset afterwards, so inlined
# onnxscript functions must be written against opset 18 (an opset-20 function
# fails to inline: "domain '' has version 18 in the model but version 20 in
# the function"). Plain Python functions are traced instead of inlined: their
# ops are recorded straight into the graph at the op's own version, which is
# how RMSNormalization-23 gets in (the same way torch's own aten.rms_norm
# translation does it).


def _scalar_like(value: float, x: ir.Value) -> ir.Value:
    """A constant scalar of ``x``'s dtype (no CastLike left for a runtime to fold)."""
    return op18.Constant(value=ir.tensor(value, dtype=x.dtype))


def _standard_translation(x, weight, bias, eps: float):
    mean_square = op18.ReduceMean(op18.Pow(x, _scalar_like(2.0, x)), [-1], keepdims=1)
    rms = op18.Sqrt(op18.Add(mean_square, _scalar_like(eps, x)))
    return op18.Add(op18.Mul(op18.Div(x, rms), weight), bias)


def _opset23_translation(x, weight, bias, eps: float):
    stash = _STASH_DOUBLE if x.dtype == ir.DataType.DOUBLE else _STASH_FLOAT
    return op23.Add(op23.RMSNormalization(x, weight, axis=-1, epsilon=eps, stash_type=stash), bias)


# A residual norm: the Add first, its output both normalised and returned.
def _standard_add_translation(x, residual, weight, bias, eps: float):
    s = op18.Add(x, residual)
    return _standard_translation(s, weight, bias, eps), s


def _opset23_add_translation(x, residual, weight, bias, eps: float):
    s = op23.Add(x, residual)
    return _opset23_translation(s, weight, bias, eps), s


_myops = onnxscript.values.Opset(CUSTOM_DOMAIN, CUSTOM_DOMAIN_VERSION)


# A traced function cannot emit a node of an unknown domain ("OpSchema not
# found"), so this one is a script function: it is inlined into one myops node.
# The return annotation is required: without it the exporter sees a function
# with no outputs and hands the next op an empty tuple. FLOAT only types the
# function signature; after inlining the node carries x's real dtype, and the
# output type and shape come from the op's fake kernel.
@onnxscript.script(_myops)
def _custom_translation(x: FLOAT, weight: FLOAT, bias: FLOAT, eps: float) -> FLOAT:
    y = _myops.fused_norm(x, weight, bias, epsilon=eps)
    return y


# Two targets: the node gets two outputs (the op has no schema to say so).
@onnxscript.script(_myops)
def _custom_add_translation(x: FLOAT, residual: FLOAT, weight: FLOAT, bias: FLOAT, eps: float) -> tuple[FLOAT, FLOAT]:
    y, s = _myops.fused_add_norm(x, residual, weight, bias, epsilon=eps)
    return y, s


# --- TorchScript exporter symbolics (deprecated exporter, kept for its users) --
# parse_args turns eps into a Python float ("f") and keeps tensors as graph
# values ("v"); without it eps arrives as a graph Value and cannot become an
# attribute or a typed constant.


def _typed_scalar(g, value: float, like) -> torch.Value:
    return g.op("Constant", value_t=torch.tensor(value, dtype=like.type().dtype()))


def _standard_nodes(g, x, weight, bias, eps: float):
    axes = g.op("Constant", value_t=torch.tensor([-1], dtype=torch.int64))  # opset >= 18: axes is an input
    mean_square = g.op("ReduceMean", g.op("Pow", x, _typed_scalar(g, 2.0, x)), axes, keepdims_i=1)
    rms = g.op("Sqrt", g.op("Add", mean_square, _typed_scalar(g, eps, x)))
    return g.op("Add", g.op("Mul", g.op("Div", x, rms), weight), bias)


@symbolic_helper.parse_args("v", "v", "v", "f")
def _standard_symbolic(g, x, weight, bias, eps):
    return _standard_nodes(g, x, weight, bias, eps)


@symbolic_helper.parse_args("v", "v", "v", "v", "f")
def _standard_add_symbolic(g, x, residual, weight, bias, eps):
    s = g.op("Add", x, residual)
    return _standard_nodes(g, s, weight, bias, eps), s


@symbolic_helper.parse_args("v", "v", "v", "f")
def _custom_symbolic(g, x, weight, bias, eps):
    y = g.op(f"{CUSTOM_DOMAIN}::{CUSTOM_OP_TYPE}", x, weight, bias, epsilon_f=eps)
    # The TorchScript exporter cannot infer an unknown op's output: give it x's
    # type (dtype and symbolic shape) so the file records Y's shape.
    y.setType(x.type())
    return y


@symbolic_helper.parse_args("v", "v", "v", "v", "f")
def _custom_add_symbolic(g, x, residual, weight, bias, eps):
    y, s = g.op(f"{CUSTOM_DOMAIN}::{CUSTOM_ADD_OP_TYPE}", x, residual, weight, bias, epsilon_f=eps, outputs=2)
    y.setType(x.type())
    s.setType(x.type())
    return y, s


ROUTES: dict[str, Route] = {
    "standard": Route(
        name="standard",
        summary="standard ONNX ops in ORT's SimplifiedLayerNormFusion pattern, plus the bias Add",
        opset=DEFAULT_OPSET,
        norm_ops=tuple(("", t) for t in ("Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul", "Add")),
        opset_imports={"": DEFAULT_OPSET},
        dynamo_translation=_standard_translation,
        torchscript_symbolic=_standard_symbolic,
        add_norm_ops=(("", "Add"), *(("", t) for t in ("Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul", "Add"))),
        add_dynamo_translation=_standard_add_translation,
        add_torchscript_symbolic=_standard_add_symbolic,
    ),
    "opset23": Route(
        name="opset23",
        summary="ONNX RMSNormalization (opset 23) plus the bias Add",
        opset=23,
        norm_ops=(("", "RMSNormalization"), ("", "Add")),
        opset_imports={"": 23},
        dynamo_translation=_opset23_translation,
        torchscript_symbolic=None,
        add_norm_ops=(("", "Add"), ("", "RMSNormalization"), ("", "Add")),
        add_dynamo_translation=_opset23_add_translation,
        add_torchscript_symbolic=None,
        torchscript_unavailable="the TorchScript exporter writes opset 20 at most; RMSNormalization needs opset 23",
    ),
    "custom": Route(
        name="custom",
        summary=f"one opaque {CUSTOM_DOMAIN}::{CUSTOM_OP_TYPE} (or {CUSTOM_ADD_OP_TYPE}) node per norm (needs the ORT "
        "custom-op library)",
        opset=DEFAULT_OPSET,
        norm_ops=((CUSTOM_DOMAIN, CUSTOM_OP_TYPE),),
        opset_imports={"": DEFAULT_OPSET, CUSTOM_DOMAIN: CUSTOM_DOMAIN_VERSION},
        dynamo_translation=_custom_translation,
        torchscript_symbolic=_custom_symbolic,
        add_norm_ops=((CUSTOM_DOMAIN, CUSTOM_ADD_OP_TYPE),),
        add_dynamo_translation=_custom_add_translation,
        add_torchscript_symbolic=_custom_add_symbolic,
    ),
}


def get_route(name: str) -> Route:
    try:
        return ROUTES[name]
    except KeyError:
        raise ValueError(f"route must be one of {sorted(ROUTES)}, got {name!r}") from None


def parse_routes(spec: str) -> list[Route]:
    """``"all"``, one name, or a comma-separated list of names -> routes in that order."""
    names = list(ROUTES) if spec.strip() == "all" else [s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        raise ValueError(f"route must be 'all', one of {sorted(ROUTES)} or a comma list of them, got {spec!r}")
    routes = [get_route(n) for n in names]
    return list({r.name: r for r in routes}.values())
