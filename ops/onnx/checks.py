"""Post-export checks: is the file what its route promised?

``check_export`` runs all of them and raises ``ExportCheckError`` listing every
failure, so one run shows all that is wrong:

  * ``onnx.checker`` (full check) and strict shape inference, with the graph
    outputs' inferred types compared to the ones the exporter recorded;
  * opset imports exactly as the route says (``myops`` only in ``custom``);
  * no stray custom-domain or norm-like node, and per norm exactly the route's
    nodes, wired as the math says (Pow exponent 2, ReduceMean over the last
    axis, the module's eps, Div(x, .), the module's weight and bias), which is
    what catches a wrong axis that happens to give close numbers; a norm
    called with a residual has the route's residual form (an Add of two
    computed values in front, its output normalised; or one fused_add_norm
    node);
  * every parameter of the module stays an initializer (by value: the
    exporters rename and transpose Linear weights), no graph input besides the
    data, and no node that computes only from constants (a weight that
    became a runtime computation);
  * batch and sequence dims stay symbolic.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import onnx
import torch
from torch import nn

from ops.norms import Norm
from ops.onnx.graph import GraphIndex, attribute_values, norm_groups, op_key, tensor_type_text
from ops.onnx.routes import CUSTOM_ADD_OP_TYPE, CUSTOM_DOMAIN, CUSTOM_OP_TYPE, Route
from ops.onnx.schema import register_custom_schema

_CUSTOM_OPS = {(CUSTOM_DOMAIN, CUSTOM_OP_TYPE), (CUSTOM_DOMAIN, CUSTOM_ADD_OP_TYPE)}
# Ops that only a norm may produce: one outside a norm's nodes is stray.
_NORM_ONLY_OPS = {("", "RMSNormalization"), ("", "SimplifiedLayerNormalization"), *_CUSTOM_OPS}


class ExportCheckError(RuntimeError):
    """An exported file breaks its route's promise; the message lists every failure."""


@dataclass
class CheckReport:
    route: Route
    norm_paths: list[str]
    groups: dict[str, list[onnx.NodeProto]]
    node_counts: Counter
    initializer_count: int
    parameter_count: int


def norm_paths_of(module: nn.Module) -> list[str]:
    """Module paths of the Norms in ``module``, in registration (= execution, for our models) order."""
    return [name for name, m in module.named_modules() if isinstance(m, Norm)]


def check_export(model: onnx.ModelProto, route: Route, module: nn.Module, input_names: list[str]) -> CheckReport:
    """Run every check on ``model`` (exported from ``module`` by ``route``); raise on any failure."""
    failures: list[str] = []
    index = GraphIndex.of(model)
    paths = norm_paths_of(module)
    if not paths:
        raise ExportCheckError("the exported module contains no ops.norms.Norm: nothing to route")
    groups = norm_groups(model, paths)
    params = dict(module.named_parameters())

    failures += _checker_and_inference(model)
    failures += _opset_imports(model, route)
    failures += _stray_nodes(model, route, groups)
    norms = dict(module.named_modules())
    for path, nodes in groups.items():
        failures += [f"norm {path or '(module)'}: {f}" for f in _norm_nodes(nodes, route, norms[path], index)]
    failures += _weights_stay_initializers(index, params, input_names)
    failures += _dynamic_dims(model)

    if failures:
        listed = "\n".join(f"  - {f}" for f in failures)
        raise ExportCheckError(f"route {route.name!r}: {len(failures)} post-export check(s) failed:\n{listed}")
    return CheckReport(
        route=route,
        norm_paths=paths,
        groups=groups,
        node_counts=Counter(op_key(n) for n in model.graph.node),
        initializer_count=len(index.initializers),
        parameter_count=len(params),
    )


# --- checker and shape inference ---------------------------------------------


def _checker_and_inference(model: onnx.ModelProto) -> list[str]:
    # The myops schema (ops/onnx/schema.py) lets the checker validate the
    # custom node and lets strict inference carry shapes through it instead of
    # stopping silently at an unknown op (which is what happens without it:
    # everything downstream of the first custom node goes unchecked).
    register_custom_schema()
    failures = []
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as error:
        # full_check runs strict inference too, so a shape conflict surfaces here first.
        failures.append(f"onnx.checker (full check): {str(error).strip()}")
    try:
        # Strict inference over the file as written: any conflict between an
        # inferred type and one the exporter recorded raises.
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
        # Again with every recorded shape but the inputs' removed: the output
        # shapes must follow from the inputs alone and equal the recorded ones.
        bare = onnx.ModelProto()
        bare.CopyFrom(model)
        del bare.graph.value_info[:]
        for value in bare.graph.output:
            value.type.tensor_type.ClearField("shape")
        inferred = onnx.shape_inference.infer_shapes(bare, check_type=True, strict_mode=True, data_prop=True)
    except onnx.shape_inference.InferenceError as error:
        return failures + [f"strict shape inference: {str(error).strip()}"]
    for recorded, value in zip(model.graph.output, inferred.graph.output, strict=True):
        failures += _compare_types(recorded, value)
    return failures


def _compare_types(recorded: onnx.ValueInfoProto, inferred: onnx.ValueInfoProto) -> list[str]:
    rt, it = recorded.type.tensor_type, inferred.type.tensor_type
    name = recorded.name
    if not it.HasField("shape"):
        return [f"strict shape inference could not infer the shape of output {name!r} from the inputs"]
    if rt.elem_type != it.elem_type or len(rt.shape.dim) != len(it.shape.dim):
        return [f"output {name!r}: recorded {tensor_type_text(recorded)}, inferred {tensor_type_text(inferred)}"]
    for r, i in zip(rt.shape.dim, it.shape.dim, strict=True):
        if r.WhichOneof("value") != i.WhichOneof("value") or r.dim_value != i.dim_value or r.dim_param != i.dim_param:
            return [f"output {name!r}: recorded {tensor_type_text(recorded)}, inferred {tensor_type_text(inferred)}"]
    return []


# --- opsets and node inventory -------------------------------------------------


def _opset_imports(model: onnx.ModelProto, route: Route) -> list[str]:
    found = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    if found != route.opset_imports:
        return [f"opset imports {found} differ from the route's {route.opset_imports}"]
    return []


def _stray_nodes(model: onnx.ModelProto, route: Route, groups: dict[str, list[onnx.NodeProto]]) -> list[str]:
    failures = []
    in_norms = {id(n) for nodes in groups.values() for n in nodes}
    allowed_domains = set(route.opset_imports)
    for node in model.graph.node:
        key = op_key(node)
        if key[0] not in allowed_domains:
            failures.append(
                f"stray node {node.name or node.op_type} of domain {key[0]!r} "
                f"(the route allows {sorted(allowed_domains)})"
            )
        elif key in _NORM_ONLY_OPS and id(node) not in in_norms:
            failures.append(f"stray {key[0] or 'ai.onnx'}::{key[1]} node {node.name!r} outside every norm")
    custom = sum(1 for n in model.graph.node if op_key(n) in _CUSTOM_OPS)
    expected = len(groups) if route.custom_domain else 0
    if custom != expected:
        failures.append(f"{custom} {CUSTOM_DOMAIN} nodes, expected {expected} (one per norm)")
    return failures


# --- one norm ------------------------------------------------------------------


def _norm_nodes(nodes: list[onnx.NodeProto], route: Route, norm: Norm, index: GraphIndex) -> list[str]:
    compute = [n for n in nodes if n.op_type != "Constant"]
    found = tuple(op_key(n) for n in compute)
    if found == route.norm_ops:
        verify = {"standard": _standard_wiring, "opset23": _opset23_wiring, "custom": _custom_wiring}[route.name]
        wiring = verify(compute, norm.eps, index)
    elif found == route.add_norm_ops:
        wiring = _residual_wiring(compute, route, norm.eps, index)
    else:
        return [
            f"nodes {_ops_text(found)}, the route promises {_ops_text(route.norm_ops)} "
            f"(or with a residual {_ops_text(route.add_norm_ops)})"
        ]
    failures = wiring.failures
    failures += _is_parameter(index, wiring.weight, _exact(norm.weight), "weight")
    failures += _is_parameter(index, wiring.bias, _exact(norm.bias), "bias")
    if index.is_constant(wiring.x):
        failures.append(f"the normalised input {wiring.x!r} is a constant")
    return failures


@dataclass
class _Wiring:
    """What one norm's nodes read: the normalised input, the weight and bias names; what is wrong."""

    x: str
    weight: str
    bias: str
    failures: list[str]


def _ops_text(ops: tuple[tuple[str, str], ...]) -> str:
    return " -> ".join(f"{d}::{t}" if d else t for d, t in ops) or "(none)"


def _scalar(index: GraphIndex, name: str) -> float | None:
    value = index.constant(name)
    if value is None or value.size != 1:
        return None
    return float(value.reshape(()))


def _eps_matches(found: float | None, eps: float, stored_as: np.dtype) -> bool:
    """``found`` is eps as the graph stores it: exactly ``eps`` rounded to ``stored_as``.

    (In a float16 graph eps=1e-6 is a subnormal, 1.013e-6: that is the value
    the graph really adds, and the check says so rather than hiding it
    behind a loose tolerance.)
    """
    return found is not None and found == float(np.asarray(eps, dtype=stored_as))


def _exact(value: torch.Tensor | np.ndarray) -> np.ndarray:
    """float64 copy: exact for every float dtype (bfloat16 included, which numpy lacks)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().to(torch.float64).numpy()
    return np.asarray(value).astype(np.float64)


def _standard_wiring(n: list[onnx.NodeProto], eps: float, index: GraphIndex) -> _Wiring:
    pow_, mean, add, sqrt, div, mul, add_bias = n
    x = pow_.input[0]
    failures = []
    if _scalar(index, pow_.input[1]) != 2.0:
        failures.append(f"Pow exponent is {index.constant(pow_.input[1])}, not the constant 2")
    axes = index.constant(mean.input[1]) if len(mean.input) > 1 else attribute_values(mean).get("axes")
    if axes is None or [int(a) for a in np.ravel(axes)] != [-1]:
        failures.append(f"ReduceMean axes {axes} are not [-1] (the last axis)")
    if attribute_values(mean).get("keepdims", 1) != 1:
        failures.append("ReduceMean drops the reduced axis (keepdims must be 1)")
    if mean.input[0] != pow_.output[0]:
        failures.append("ReduceMean does not read Pow's output")
    eps_input = [i for i in add.input if i != mean.output[0]]
    eps_value = index.constant(eps_input[0]) if len(eps_input) == 1 else None
    stored_as = eps_value.dtype if eps_value is not None else np.float64
    if eps_value is None or eps_value.size != 1 or not _eps_matches(float(eps_value.reshape(())), eps, stored_as):
        failures.append(f"Add after ReduceMean does not add the constant eps {eps}")
    if sqrt.input[0] != add.output[0]:
        failures.append("Sqrt does not read the eps Add")
    if list(div.input) != [x, sqrt.output[0]]:
        failures.append("Div is not Div(x, Sqrt(...)) on the norm's own input")
    if mul.input[0] != div.output[0]:
        failures.append("Mul(weight) does not read Div's output")
    if add_bias.input[0] != mul.output[0]:
        failures.append("the bias Add does not read Mul's output")
    return _Wiring(x=x, weight=mul.input[1], bias=add_bias.input[1], failures=failures)


def _opset23_wiring(n: list[onnx.NodeProto], eps: float, index: GraphIndex) -> _Wiring:
    rms, add_bias = n
    attrs = attribute_values(rms)
    failures = []
    if attrs.get("axis", -1) != -1:
        failures.append(f"RMSNormalization axis {attrs.get('axis')} is not -1")
    if not _eps_matches(attrs.get("epsilon"), eps, np.float32):  # float attributes are float32
        failures.append(f"RMSNormalization epsilon {attrs.get('epsilon')} is not the module's eps {eps}")
    if len(rms.input) != 2:
        failures.append(f"RMSNormalization has {len(rms.input)} inputs, expected (X, scale)")
    if add_bias.input[0] != rms.output[0]:
        failures.append("the bias Add does not read RMSNormalization's output")
    return _Wiring(
        x=rms.input[0], weight=rms.input[1] if len(rms.input) > 1 else "", bias=add_bias.input[1], failures=failures
    )


def _custom_node(node: onnx.NodeProto, eps: float, index: GraphIndex, inputs: int, outputs: int) -> list[str]:
    """A myops node's arity, its one float attribute epsilon (the module's eps) and its recorded output types."""
    attrs = attribute_values(node)
    if len(node.input) != inputs or len(node.output) != outputs:
        return [
            f"{node.op_type} has {len(node.input)} inputs and {len(node.output)} outputs, expected {inputs} and "
            f"{outputs}"
        ]
    failures = []
    if (
        set(attrs) != {"epsilon"}
        or not isinstance(attrs["epsilon"], float)
        or not _eps_matches(attrs["epsilon"], eps, np.float32)
    ):
        failures.append(f"{node.op_type} attributes {attrs}, expected only the float epsilon={eps}")
    return failures + _custom_output_type(node, index)


def _custom_wiring(n: list[onnx.NodeProto], eps: float, index: GraphIndex) -> _Wiring:
    (node,) = n
    failures = _custom_node(node, eps, index, inputs=3, outputs=1)
    if len(node.input) != 3 or len(node.output) != 1:
        return _Wiring(x=node.input[0] if node.input else "", weight="", bias="", failures=failures)
    return _Wiring(x=node.input[0], weight=node.input[1], bias=node.input[2], failures=failures)


def _custom_output_type(node: onnx.NodeProto, index: GraphIndex) -> list[str]:
    """The exporter must record each used output with X's dtype and shape (no schema-derived shape to fall back on
    in a runtime); an output nothing reads (the sum of the last residual norm) may go unrecorded."""
    recorded = index.value_types()
    read = {name for other in index.model.graph.node for name in other.input} | {
        v.name for v in index.model.graph.output
    }
    x = recorded.get(node.input[0])
    failures = []
    for position, name in enumerate(node.output):
        if position and name not in read:
            continue
        value = recorded.get(name)
        if value is None or not value.tensor_type.HasField("shape"):
            failures.append(f"the exported graph records no shape for {node.op_type}'s output {name!r}")
        elif x is not None and x.tensor_type != value.tensor_type:
            failures.append(f"{node.op_type}'s recorded output {name!r} type differs from its input X's")
    return failures


def _residual_wiring(n: list[onnx.NodeProto], route: Route, eps: float, index: GraphIndex) -> _Wiring:
    """A norm called with a residual: Add(x, residual) and the route's norm of its output, or one fused_add_norm."""
    if route.name == "custom":
        return _custom_add_wiring(n, eps, index)
    add, rest = n[0], n[1:]
    wiring = {"standard": _standard_wiring, "opset23": _opset23_wiring}[route.name](rest, eps, index)
    failures = list(wiring.failures)
    if wiring.x != add.output[0]:
        failures.append("the norm does not read the residual Add's output")
    constant = [name for name in add.input if index.is_constant(name)]
    if len(add.input) != 2 or constant:
        failures.append(f"the residual Add must add two computed values, got inputs {list(add.input)}")
    # The sum is what the norm reads and what the op returns; the checks of x below look at the Add's inputs.
    return _Wiring(x=add.input[0], weight=wiring.weight, bias=wiring.bias, failures=failures)


def _custom_add_wiring(n: list[onnx.NodeProto], eps: float, index: GraphIndex) -> _Wiring:
    (node,) = n
    failures = _custom_node(node, eps, index, inputs=4, outputs=2)
    if len(node.input) != 4 or len(node.output) != 2:
        return _Wiring(x=node.input[0] if node.input else "", weight="", bias="", failures=failures)
    if index.is_constant(node.input[1]):
        failures.append(f"{CUSTOM_ADD_OP_TYPE}'s residual {node.input[1]!r} is a constant")
    return _Wiring(x=node.input[0], weight=node.input[2], bias=node.input[3], failures=failures)


def _is_parameter(index: GraphIndex, name: str, value: np.ndarray, role: str) -> list[str]:
    found = index.initializers.get(name)
    if found is None:
        return [f"{role} {name!r} is not an initializer"]
    if found.shape != value.shape or not np.array_equal(_exact(found), value):
        return [f"{role} initializer {name!r} does not hold the module's {role}"]
    return []


# --- weights, inputs, dims -------------------------------------------------------


def _weights_stay_initializers(index: GraphIndex, params: dict[str, torch.Tensor], input_names: list[str]) -> list[str]:
    failures = []
    stored = [
        _exact(v) for v in index.initializers.values() if np.issubdtype(v.dtype, np.floating) or v.dtype.kind == "V"
    ]
    missing = []
    for name, param in params.items():
        value = _exact(param)
        # Linear weights are stored transposed for MatMul (folded at export).
        candidates = (value,) if value.ndim != 2 else (value, value.T)
        if not any(s.shape == c.shape and np.array_equal(s, c) for s in stored for c in candidates):
            missing.append(name)
    if missing:
        failures.append(
            f"{len(missing)} of {len(params)} parameters are not stored as initializers "
            f"(a weight became a computation or a graph input): {', '.join(missing[:6])}"
        )
    if index.graph_inputs != input_names:
        failures.append(f"graph inputs {index.graph_inputs}, expected only {input_names} (weights must not be inputs)")
    for node in index.model.graph.node:
        if node.op_type != "Constant" and node.input and all(index.is_constant(i) for i in node.input):
            failures.append(
                f"node {node.name or node.op_type} ({node.op_type}) computes only from constants (not folded at export)"
            )
    return failures


def _dynamic_dims(model: onnx.ModelProto) -> list[str]:
    failures = []
    initializers = {t.name for t in model.graph.initializer}
    for kind, values in (("input", model.graph.input), ("output", model.graph.output)):
        for value in values:
            if value.name in initializers:
                continue
            dims = value.type.tensor_type.shape.dim
            if not dims:
                failures.append(f"graph {kind} {value.name!r} has no recorded shape")
                continue
            fixed = [axis for axis, d in enumerate(dims[:-1]) if not d.HasField("dim_param")]
            if fixed:
                failures.append(f"graph {kind} {value.name!r}: dims {fixed} are fixed, expected symbolic (dynamic)")
            if not dims[-1].HasField("dim_value"):
                failures.append(f"graph {kind} {value.name!r}: the normalised (last) dim is not static")
    return failures
