"""A generated corpus of malformed models for myops::fused_norm and myops::fused_add_norm.

Each case is one small model, the feeds to run it with and what a server may
see: ``correct`` (the op must compute the float64 reference within the dtype's
tolerance), ``error`` (a clean error: ORT refuses the graph or the feeds, or
the op fails naming ``operand``; never a result) or ``either`` (a clean error
or a correct result: where ORT's own checks decide first). Nothing may crash,
abort or hang; tests/helpers/hostile_worker.py runs them.

Case kinds (the ``kind`` of each case): input_count, rank, dtype,
vector_length, dynamic_dims, zero_dims, overflow, attributes, epsilon, empty,
output_types, graph_inputs, structure; regression keeps the cases of crashes
found and fixed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper

from ops.reference import reference_add_norm, reference_norm, tolerance

DOMAIN = "myops"
OPS = ("fused_norm", "fused_add_norm")
HIDDEN = 8
EPS = 1e-5
# Every ONNX tensor element type but UNDEFINED.
ALL_TYPES = [value for name, value in TensorProto.DataType.items() if value != TensorProto.UNDEFINED]
SUPPORTED = {
    TensorProto.FLOAT: torch.float32,
    TensorProto.DOUBLE: torch.float64,
    TensorProto.FLOAT16: torch.float16,
    TensorProto.BFLOAT16: torch.bfloat16,
}
# numpy can carry these as feeds and fetches; bfloat16 goes in and out through Cast nodes.
NUMPY = {TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64, TensorProto.FLOAT16: np.float16}


@dataclass
class Case:
    kind: str
    name: str
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray] = field(default_factory=dict)
    expect: str = "correct"  # "correct" | "error" | "either"
    operand: str | None = None  # the word an error of the op must contain
    references: list[np.ndarray] = field(default_factory=list)  # float64, one per graph output
    # Where X has no elements but dims numpy cannot hold: every output must be empty, of this shape.
    empty_shape: list[int] | None = None
    atol: float = 0.0
    rtol: float = 0.0


def type_name(elem_type: int) -> str:
    return TensorProto.DataType.Name(elem_type)


# --- building blocks ------------------------------------------------------------


def make_model(nodes, inputs, outputs, initializers=(), value_info=()) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "hostile", list(inputs), list(outputs), list(initializers))
    graph.value_info.extend(value_info)
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid(DOMAIN, 1)],
        ir_version=10,
        producer_name="hostile-corpus",
    )


def op_node(op: str, inputs: list[str], outputs: list[str] | None = None, **attrs) -> onnx.NodeProto:
    attrs = {"epsilon": EPS, **attrs}
    attrs = {k: v for k, v in attrs.items() if v is not None}
    default_outputs = ["Y"] if op == "fused_norm" else ["Y", "S"]
    return helper.make_node(op, inputs, default_outputs if outputs is None else outputs, domain=DOMAIN, **attrs)


def vinfo(name: str, elem_type: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, shape)


def zeros_tensor(name: str, elem_type: int, dims: list[int]) -> onnx.TensorProto:
    """An initializer of any element type (zeros; empty strings for STRING)."""
    count = int(np.prod(dims)) if dims else 1
    values = [b""] * count if elem_type == TensorProto.STRING else [0] * count
    return helper.make_tensor(name, elem_type, dims, values)


def array_tensor(name: str, values: torch.Tensor, elem_type: int) -> onnx.TensorProto:
    """An initializer holding ``values`` rounded to ``elem_type`` (one of SUPPORTED)."""
    if elem_type == TensorProto.BFLOAT16:
        raw = values.to(torch.bfloat16).view(torch.int16).numpy().tobytes()
        return helper.make_tensor(name, elem_type, list(values.shape), raw, raw=True)
    array = values.to(SUPPORTED[elem_type]).numpy()
    return helper.make_tensor(name, elem_type, list(values.shape), array.tobytes(), raw=True)


def draw(shape, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """x and residual of ``shape``, weight and bias of its last dim (float32, realistic scales)."""
    g = torch.Generator().manual_seed(seed)
    hidden = shape[-1] if len(shape) else 1
    x = torch.randn(tuple(shape), generator=g) * 1.5 + 0.2
    residual = torch.randn(tuple(shape), generator=g)
    weight = 1.0 + 0.1 * torch.randn(hidden, generator=g)
    bias = 0.05 * torch.randn(hidden, generator=g)
    return x, residual, weight, bias


def expected(op: str, dtype: torch.dtype, x, residual, weight, bias, eps: float) -> list[np.ndarray]:
    """The float64 reference outputs, of the inputs rounded to ``dtype`` as the model holds them."""
    cast = [t.to(dtype) for t in (x, residual, weight, bias)]
    eps = float(np.float32(eps))  # the attribute is a float32
    if op == "fused_norm":
        return [reference_norm(cast[0], cast[2].double(), cast[3].double(), eps).numpy()]
    y, s = reference_add_norm(cast[0], cast[1], cast[2].double(), cast[3].double(), eps)
    return [y.numpy(), s.numpy()]


def valid_case(
    kind: str,
    name: str,
    op: str,
    shape: list[int],
    elem_type: int = TensorProto.FLOAT,
    seed: int = 0,
    eps: float = EPS,
    attrs: dict | None = None,
    vectors_as_inputs: bool = False,
    x_shape_declared: object = "same",
    expect: str = "correct",
) -> Case:
    """A well-formed call of ``op`` on X of ``shape``: X (and residual) fed, weight and bias initializers."""
    dtype = SUPPORTED[elem_type]
    x, residual, weight, bias = draw(shape, seed)
    declared = list(shape) if x_shape_declared == "same" else x_shape_declared
    io_type = TensorProto.FLOAT if elem_type == TensorProto.BFLOAT16 else elem_type
    nodes, inputs, inits, feeds = [], [], [], {}
    operands = ["X", "R"] if op == "fused_add_norm" else ["X"]
    values = {"X": x, "R": residual, "W": weight, "B": bias}
    for name_ in operands + (["W", "B"] if vectors_as_inputs else []):
        vec = name_ in ("W", "B")
        inputs.append(vinfo(name_, io_type, [HIDDEN if not shape else shape[-1]] if vec else declared))
        feeds[name_] = values[name_].to(dtype).to(torch.float32 if io_type == TensorProto.FLOAT else dtype).numpy()
    if not vectors_as_inputs:
        inits += [array_tensor("W", weight, elem_type), array_tensor("B", bias, elem_type)]
    node_inputs = ["X", "R", "W", "B"] if op == "fused_add_norm" else ["X", "W", "B"]
    outputs = ["Y"] if op == "fused_norm" else ["Y", "S"]
    if elem_type == TensorProto.BFLOAT16:
        # In and out through Cast: numpy has no bfloat16.
        for name_ in [n for n in node_inputs if n in feeds]:
            nodes.append(helper.make_node("Cast", [name_], [f"{name_}_bf16"], to=TensorProto.BFLOAT16))
        node_inputs = [f"{n}_bf16" if n in feeds else n for n in node_inputs]
        nodes.append(op_node(op, node_inputs, [f"{o}_bf16" for o in outputs], **{"epsilon": eps, **(attrs or {})}))
        nodes += [helper.make_node("Cast", [f"{o}_bf16"], [o], to=TensorProto.FLOAT) for o in outputs]
    else:
        nodes.append(op_node(op, node_inputs, outputs, **{"epsilon": eps, **(attrs or {})}))
    graph_outputs = [vinfo(o, io_type, None) for o in outputs]
    tol = tolerance(dtype)
    return Case(
        kind,
        name,
        make_model(nodes, inputs, graph_outputs, inits),
        feeds,
        expect,
        None,
        expected(op, dtype, x, residual, weight, bias, eps),
        tol.atol,
        tol.rtol,
    )


def raw_case(
    kind: str,
    name: str,
    op: str,
    tensors: dict[str, tuple[int, list[int]]],
    node_inputs: list[str],
    expect: str,
    operand: str | None,
    outputs: list[str] | None = None,
    output_types: dict[str, int] | None = None,
    fed: tuple[str, ...] = ("X", "R"),
    declared: dict[str, object] | None = None,
    **attrs,
) -> Case:
    """Any call: ``tensors`` name -> (element type, shape); those in ``fed`` are graph inputs, the rest initializers.

    Fed tensors must be of a numpy type; initializers may be of any type (zeros).
    """
    inputs, inits, feeds = [], [], {}
    for index, (name_, (elem_type, shape)) in enumerate(tensors.items()):
        if name_ in fed:
            shown = (declared or {}).get(name_, shape)
            inputs.append(vinfo(name_, elem_type, shown))
            feeds[name_] = (np.random.default_rng(index).standard_normal(shape) if shape else np.float64(0.5)).astype(
                NUMPY[elem_type]
            )
        else:
            inits.append(zeros_tensor(name_, elem_type, shape))
    outputs = (["Y"] if op == "fused_norm" else ["Y", "S"]) if outputs is None else outputs
    output_types = output_types or {}
    x_type = tensors.get("X", (TensorProto.FLOAT, []))[0]
    graph_outputs = [vinfo(o, output_types.get(o, x_type), None) for o in outputs if o]
    node = op_node(op, node_inputs, outputs, **attrs)
    return Case(kind, name, make_model([node], inputs, graph_outputs, inits), feeds, expect, operand)


def inputs_of(op: str) -> list[str]:
    return ["X", "R", "W", "B"] if op == "fused_add_norm" else ["X", "W", "B"]


def standard_tensors(op: str, x_shape=(2, 3, HIDDEN), elem_type=TensorProto.FLOAT, w_shape=None, b_shape=None):
    hidden = x_shape[-1] if x_shape else HIDDEN
    tensors = {"X": (elem_type, list(x_shape))}
    if op == "fused_add_norm":
        tensors["R"] = (elem_type, list(x_shape))
    tensors["W"] = (elem_type, [hidden] if w_shape is None else list(w_shape))
    tensors["B"] = (elem_type, [hidden] if b_shape is None else list(b_shape))
    return tensors


# --- the case kinds ---------------------------------------------------------------


def input_count() -> Iterator[Case]:
    for op in OPS:
        full = inputs_of(op)
        pool = [*full, "E1", "E2"]
        for count in range(0, 7):
            if count == len(full):
                continue
            tensors = standard_tensors(op)
            tensors["E1"] = (TensorProto.FLOAT, [HIDDEN])
            tensors["E2"] = (TensorProto.FLOAT, [HIDDEN])
            yield raw_case("input_count", f"{op}/{count}-inputs", op, tensors, pool[:count], "error", "inputs")
        # A required input left out by name: the optional-input spelling "".
        for index, missing in enumerate(full):
            names = [n if i != index else "" for i, n in enumerate(full)]
            operand = {"X": "X", "R": "residual", "W": "weight", "B": "bias"}[missing]
            yield raw_case("input_count", f"{op}/no-{missing}", op, standard_tensors(op), names, "error", operand)


def rank() -> Iterator[Case]:
    for op in OPS:
        for elem_type in SUPPORTED:
            for r in range(0, 6):
                shape = [2, 3, 1, 2][: max(r - 1, 0)] + [HIDDEN] if r else []
                name = f"{op}/{type_name(elem_type)}/rank{r}"
                if r == 0:
                    tensors = standard_tensors(op, x_shape=[], elem_type=elem_type, w_shape=[1], b_shape=[1])
                    fed = ("X", "R") if elem_type in NUMPY else ()
                    yield raw_case("rank", name, op, tensors, inputs_of(op), "error", "X", fed=fed)
                else:
                    yield valid_case("rank", name, op, shape, elem_type, seed=r)


def dtype() -> Iterator[Case]:
    for op in OPS:
        for elem_type in ALL_TYPES:
            name = type_name(elem_type)
            if elem_type in SUPPORTED:
                yield valid_case("dtype", f"{op}/X-{name}", op, [3, HIDDEN], elem_type, seed=elem_type)
            else:
                tensors = standard_tensors(op, x_shape=[3, HIDDEN], elem_type=elem_type)
                yield raw_case("dtype", f"{op}/X-{name}", op, tensors, inputs_of(op), "error", "X", fed=())
            # X float32, one other operand of this type.
            for operand, key in (("weight", "W"), ("bias", "B"), ("residual", "R")):
                if elem_type == TensorProto.FLOAT or (key == "R" and op == "fused_norm"):
                    continue
                tensors = standard_tensors(op, x_shape=[3, HIDDEN])
                tensors[key] = (elem_type, tensors[key][1])
                fed = ("X",) if key == "R" else ("X", "R")
                yield raw_case("dtype", f"{op}/{operand}-{name}", op, tensors, inputs_of(op), "error", operand, fed=fed)


def vector_length() -> Iterator[Case]:
    bad_shapes = [[HIDDEN - 1], [HIDDEN + 1], [0], [1], [HIDDEN, 1], [1, HIDDEN], [], [2, HIDDEN]]
    for op in OPS:
        for operand, key in (("weight", "W"), ("bias", "B")):
            for shape in bad_shapes:
                tensors = standard_tensors(op, **{("w_shape" if key == "W" else "b_shape"): shape})
                yield raw_case("vector_length", f"{op}/{operand}{shape}", op, tensors, inputs_of(op), "error", operand)
    for shape in ([3, HIDDEN], [2, 3, HIDDEN - 1], [2, 3, HIDDEN + 1], [2, 3, HIDDEN, 1], [2, 1, HIDDEN], [HIDDEN]):
        tensors = standard_tensors("fused_add_norm")
        tensors["R"] = (TensorProto.FLOAT, shape)
        yield raw_case(
            "vector_length", f"fused_add_norm/residual{shape}", "fused_add_norm", tensors, inputs_of("fused_add_norm"),
            "error", "residual",
        )  # fmt: skip


def dynamic_dims() -> Iterator[Case]:
    declared_forms = {
        "symbolic": ["batch", "seq", HIDDEN],
        "unnamed": [None, None, HIDDEN],
        "symbolic-hidden": ["batch", "seq", "hidden"],
        "no-shape": None,
    }
    for op in OPS:
        for form, declared in declared_forms.items():
            for shape in ([2, 3, HIDDEN], [1, 1, HIDDEN], [5, 7, HIDDEN], [0, 3, HIDDEN]):
                yield valid_case(
                    "dynamic_dims", f"{op}/{form}/{shape}", op, shape, seed=sum(shape), x_shape_declared=declared
                )
            if form in ("symbolic-hidden", "no-shape"):
                # The hidden size is only known when it runs: a wrong one must be the op's error.
                tensors = standard_tensors(op, x_shape=[2, 3, HIDDEN + 3], w_shape=[HIDDEN], b_shape=[HIDDEN])
                decl = {"X": declared, "R": declared}
                yield raw_case(
                    "dynamic_dims", f"{op}/{form}/hidden-mismatch", op, tensors, inputs_of(op), "error", "weight",
                    declared=decl,
                )  # fmt: skip
        # Fed with another shape than the fixed one declared: ORT refuses the feed.
        tensors = standard_tensors(op, x_shape=[4, HIDDEN])
        yield raw_case(
            "dynamic_dims", f"{op}/declared-fixed-fed-other", op, tensors, inputs_of(op), "error", None,
            declared={"X": [2, 3, HIDDEN], "R": [2, 3, HIDDEN]},
        )  # fmt: skip
        # weight and bias with a symbolic length, fed at run time.
        yield valid_case("dynamic_dims", f"{op}/vectors-fed", op, [2, HIDDEN], vectors_as_inputs=True)


def zero_dims() -> Iterator[Case]:
    for op in OPS:
        for elem_type in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE):
            for shape in ([0, HIDDEN], [2, 0, HIDDEN], [0, 0, HIDDEN], [1, 2, 0, HIDDEN]):
                yield valid_case("zero_dims", f"{op}/{type_name(elem_type)}/{shape}", op, shape, elem_type)
        for shape in ([4, 0], [0, 0], [0], [2, 3, 0]):
            # hidden 0: weight and bias are [0]; the output is empty.
            yield valid_case("zero_dims", f"{op}/hidden0/{shape}", op, shape)
        # hidden 0 but weight and bias of length 8: the op names weight.
        tensors = standard_tensors(op, x_shape=[4, 0], w_shape=[HIDDEN], b_shape=[HIDDEN])
        yield raw_case("zero_dims", f"{op}/hidden0-weight8", op, tensors, inputs_of(op), "error", "weight")


def _overflow_source(shape: list[int], how: str) -> tuple[list, list]:
    """Nodes and initializers making a float tensor 'X0' of ``shape`` inside the graph."""
    dims = helper.make_tensor("dims", TensorProto.INT64, [len(shape)], shape)
    if how == "constant-of-shape":
        return [helper.make_node("ConstantOfShape", ["dims"], ["X0"])], [dims]
    if how == "expand":
        one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
        return [helper.make_node("Expand", ["one", "dims"], ["X0"])], [dims, one]
    empty = helper.make_tensor("empty", TensorProto.FLOAT, [0], [])
    return [helper.make_node("Reshape", ["empty", "dims"], ["X0"])], [dims, empty]


def overflow() -> Iterator[Case]:
    huge = {
        "int32-rows": [2**31, 0],
        "int32-rows-3d": [2**16, 2**16, 0],
        "uint32-rows": [2**32 + 1, 0],
        "int64-rows": [2**40, 2**40, 0],
        "int64-max": [2**63 - 1, 2, 0],
        "int64-rows-4": [2**62, 4, 0],
        "int32-hidden": [0, 2**31],
        "int64-hidden": [2**40, 0, 2**40],
        "int64-count": [2**32, 2**32, 2],
    }
    for op in OPS:
        for label, shape in huge.items():
            hidden = shape[-1]
            vector = [hidden] if hidden <= 2**20 else [0]  # a vector of 2^31 floats is 8 GB: not for a test
            for how in ("constant-of-shape", "expand", "reshape"):
                nodes, inits = _overflow_source(shape, how)
                inits += [zeros_tensor("W", TensorProto.FLOAT, vector), zeros_tensor("B", TensorProto.FLOAT, vector)]
                ins = ["X0", "X0", "W", "B"] if op == "fused_add_norm" else ["X0", "W", "B"]
                outputs = ["Y"] if op == "fused_norm" else ["Y", "S"]
                nodes.append(op_node(op, ins, outputs))
                model = make_model(nodes, [], [vinfo(o, TensorProto.FLOAT, None) for o in outputs], inits)
                yield Case("overflow", f"{op}/{label}/{how}", model, {}, "either", empty_shape=shape)
            # Declared by the graph input only; fed with a small tensor, which ORT refuses.
            tensors = standard_tensors(op, x_shape=[2, HIDDEN])
            yield raw_case(
                "overflow", f"{op}/{label}/declared", op, tensors, inputs_of(op), "error", None,
                declared={"X": shape, "R": shape},
            )  # fmt: skip
            # An initializer that claims the huge shape but holds no data.
            x_init = TensorProto(name="X", data_type=TensorProto.FLOAT, dims=shape, raw_data=b"")
            inits = [x_init, zeros_tensor("W", TensorProto.FLOAT, vector), zeros_tensor("B", TensorProto.FLOAT, vector)]
            ins = ["X", "X", "W", "B"] if op == "fused_add_norm" else ["X", "W", "B"]
            outputs = ["Y"] if op == "fused_norm" else ["Y", "S"]
            model = make_model(
                [op_node(op, ins, outputs)], [], [vinfo(o, TensorProto.FLOAT, None) for o in outputs], inits
            )
            yield Case("overflow", f"{op}/{label}/initializer-without-data", model, {}, "either", empty_shape=shape)


def attributes() -> Iterator[Case]:
    wrong_types = {
        "missing": None,
        "int": 1,
        "string": "1e-5",
        "floats": [1e-5, 1e-5],
        "ints": [1],
        "tensor": helper.make_tensor("e", TensorProto.FLOAT, [1], [1e-5]),
    }
    for op in OPS:
        for label, value in wrong_types.items():
            tensors = standard_tensors(op)
            yield raw_case("attributes", f"{op}/epsilon-{label}", op, tensors, inputs_of(op), "error", "epsilon",
                           epsilon=value)  # fmt: skip
        # Attributes the op does not know: ignored, the result is the op's.
        for label, extra in {"axis": {"axis": 1}, "name": {"foo": "bar"}, "many": {"a": 1, "b": 2.0, "c": "x"}}.items():
            yield valid_case("attributes", f"{op}/extra-{label}", op, [2, HIDDEN], attrs=extra)
        # epsilon given twice (invalid ONNX), both times the same value, so either reading gives the reference.
        case = valid_case("attributes", f"{op}/epsilon-twice", op, [2, HIDDEN], expect="either")
        case.model.graph.node[0].attribute.append(helper.make_attribute("epsilon", EPS))
        yield case


def epsilon() -> Iterator[Case]:
    bad = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf"), "-1": -1.0, "-1e-6": -1e-6}
    good = {"0": 0.0, "-0": -0.0, "denormal": 1e-45, "1": 1.0, "1e30": 1e30, "float-max": 3.4028234e38}
    for op in OPS:
        for elem_type in (TensorProto.FLOAT, TensorProto.FLOAT16):
            for label, value in bad.items():
                tensors = standard_tensors(op, elem_type=elem_type)
                yield raw_case(
                    "epsilon", f"{op}/{type_name(elem_type)}/{label}", op, tensors, inputs_of(op), "error", "epsilon",
                    epsilon=value,
                )  # fmt: skip
            for label, value in good.items():
                yield valid_case("epsilon", f"{op}/{type_name(elem_type)}/{label}", op, [3, HIDDEN], elem_type,
                                 eps=value)  # fmt: skip


def empty() -> Iterator[Case]:
    for op in OPS:
        # Every operand empty at once.
        yield valid_case("empty", f"{op}/all-empty", op, [0, 0])
        for operand, key in (("weight", "W"), ("bias", "B")):
            tensors = standard_tensors(op, **{("w_shape" if key == "W" else "b_shape"): [0]})
            yield raw_case("empty", f"{op}/{operand}-empty", op, tensors, inputs_of(op), "error", operand)
        tensors = standard_tensors(op, x_shape=[0, HIDDEN])
        case = raw_case("empty", f"{op}/X-empty-fed", op, tensors, inputs_of(op), "correct", None)
        case.references = [np.zeros((0, HIDDEN))] * (1 if op == "fused_norm" else 2)
        yield case
    tensors = standard_tensors("fused_add_norm")
    tensors["R"] = (TensorProto.FLOAT, [0, HIDDEN])
    yield raw_case("empty", "fused_add_norm/residual-empty", "fused_add_norm", tensors, inputs_of("fused_add_norm"),
                   "error", "residual")  # fmt: skip


def output_types() -> Iterator[Case]:
    for op in OPS:
        outputs = ["Y"] if op == "fused_norm" else ["Y", "S"]
        for out in outputs:
            for elem_type in ALL_TYPES:
                if elem_type == TensorProto.FLOAT:
                    continue
                case = valid_case(
                    "output_types", f"{op}/{out}-{type_name(elem_type)}", op, [2, HIDDEN], expect="either"
                )
                for graph_output in case.model.graph.output:
                    if graph_output.name == out:
                        graph_output.type.tensor_type.elem_type = elem_type
                yield case


def graph_inputs() -> Iterator[Case]:
    for op in OPS:
        for elem_type in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16):
            for shape in ([4, HIDDEN], [2, 3, HIDDEN]):
                name = f"{op}/{type_name(elem_type)}/{shape}"
                yield valid_case("graph_inputs", name, op, shape, elem_type, seed=7, vectors_as_inputs=True)
        # Fed at run time with the wrong length: declared symbolic, so only the op can tell.
        for operand, key in (("weight", "W"), ("bias", "B")):
            for length in (HIDDEN - 1, HIDDEN + 5, 0):
                tensors = standard_tensors(op, **{("w_shape" if key == "W" else "b_shape"): [length]})
                yield raw_case(
                    "graph_inputs", f"{op}/{operand}-fed-{length}", op, tensors, inputs_of(op), "error", operand,
                    fed=("X", "R", "W", "B"), declared={"W": ["h"], "B": ["h"]},
                )  # fmt: skip
            # Fed with another dtype than X: the op names the dtypes.
            tensors = standard_tensors(op)
            tensors[key] = (TensorProto.DOUBLE, [HIDDEN])
            yield raw_case("graph_inputs", f"{op}/{operand}-fed-float64", op, tensors, inputs_of(op), "error", operand,
                           fed=("X", "R", "W", "B"))  # fmt: skip
        # X (and residual) zero initializers, weight and bias fed: Y is bias in every row, S zero.
        tensors = standard_tensors(op)
        case = raw_case("graph_inputs", f"{op}/X-initializer", op, tensors, inputs_of(op), "correct", None,
                        fed=("W", "B"))  # fmt: skip
        rows = np.broadcast_to(case.feeds["B"].astype(np.float64), (2, 3, HIDDEN))
        case.references = [rows] if op == "fused_norm" else [rows, np.zeros((2, 3, HIDDEN))]
        case.atol, case.rtol = tolerance(torch.float32).atol, tolerance(torch.float32).rtol
        yield case


def structure() -> Iterator[Case]:
    for op in OPS:
        full = inputs_of(op)
        # Outputs left out, or one too many.
        variants = {"no-Y": ["", "S"][: len(inputs_of(op)) - 2], "three-outputs": ["Y", "S", "T"]}
        if op == "fused_add_norm":
            variants |= {"no-S": ["Y", ""], "only-Y": ["Y"]}
        for label, outs in variants.items():
            yield raw_case("structure", f"{op}/{label}", op, standard_tensors(op), full, "error", None, outputs=outs)
        # A sequence where a tensor is expected.
        tensors = standard_tensors(op)
        inits = [zeros_tensor(n, t, s) for n, (t, s) in tensors.items()]
        seq = helper.make_node("SequenceConstruct", ["X"], ["Xseq"])
        ins = ["Xseq", *full[1:]]
        outs = ["Y"] if op == "fused_norm" else ["Y", "S"]
        model = make_model([seq, op_node(op, ins, outs)], [], [vinfo(o, TensorProto.FLOAT, None) for o in outs], inits)
        yield Case("structure", f"{op}/sequence-input", model, {}, "error", "X")
        # Another version of the domain: ORT serves a custom op at every version, so the result must be right.
        case = valid_case("structure", f"{op}/version-2", op, [2, HIDDEN], expect="either")
        case.model.opset_import[1].version = 2
        yield case
        # Another domain, an unknown op name: nothing serves them.
        for label, change in {"domain": ("domain", "myops.other"), "op-name": ("op_type", f"{op}_v2")}.items():
            case = raw_case("structure", f"{op}/{label}", op, standard_tensors(op), full, "error", None)
            setattr(case.model.graph.node[0], change[0], change[1])
            if change[0] == "domain":
                case.model.opset_import.append(helper.make_opsetid("myops.other", 1))
            yield case
        # One tensor as X and as weight (fused_norm), or as X and residual (fused_add_norm).
        case = valid_case("structure", f"{op}/X-shared", op, [HIDDEN], vectors_as_inputs=True)
        node = next(n for n in case.model.graph.node if n.domain == DOMAIN)
        x = torch.from_numpy(case.feeds["X"])
        b = torch.from_numpy(case.feeds["B"]).double()
        if op == "fused_norm":
            node.input[1] = "X"
            case.references = [reference_norm(x, x.double(), b, float(np.float32(EPS))).numpy()]
        else:
            node.input[1] = "X"
            w = torch.from_numpy(case.feeds["W"]).double()
            y, s = reference_add_norm(x, x, w, b, float(np.float32(EPS)))
            case.references = [y.numpy(), s.numpy()]
        kept = {"X", "B"} if op == "fused_norm" else {"X", "W", "B"}
        case.feeds = {k: v for k, v in case.feeds.items() if k in kept}
        graph_inputs = [i for i in case.model.graph.input if i.name in kept]
        del case.model.graph.input[:]
        case.model.graph.input.extend(graph_inputs)
        yield case


def regression() -> Iterator[Case]:
    """Cases of crashes found by this corpus and fixed: none yet (each fix adds its model here)."""
    return iter(())


KINDS = {
    "input_count": input_count,
    "rank": rank,
    "dtype": dtype,
    "vector_length": vector_length,
    "dynamic_dims": dynamic_dims,
    "zero_dims": zero_dims,
    "overflow": overflow,
    "attributes": attributes,
    "epsilon": epsilon,
    "empty": empty,
    "output_types": output_types,
    "graph_inputs": graph_inputs,
    "structure": structure,
    "regression": regression,
}


def corpus() -> list[Case]:
    return [case for make in KINDS.values() for case in make()]


def write_corpus(cases: list[Case], folder: Path) -> Path:
    """Each case as <index>.onnx plus <index>.npz (feeds and references); one manifest.json for the worker."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest = []
    for index, case in enumerate(cases):
        model_path = folder / f"{index:04d}.onnx"
        model_path.write_bytes(case.model.SerializeToString())
        arrays = {f"feed:{k}": v for k, v in case.feeds.items()}
        arrays |= {f"ref:{i}": r for i, r in enumerate(case.references)}
        np.savez(folder / f"{index:04d}.npz", **arrays)
        manifest.append(
            {
                "index": index,
                "kind": case.kind,
                "name": case.name,
                "expect": case.expect,
                "operand": case.operand,
                "atol": case.atol,
                "rtol": case.rtol,
                "empty_shape": case.empty_shape,
            }
        )
    path = folder / "manifest.json"
    path.write_text(json.dumps(manifest, indent=1))
    return path
