"""A short, readable text summary of an exported graph, one line per norm.

Meant for a person to eyeball: the node order of each norm with its constants
inline, so a wrong axis, a missing square or a swapped weight shows even when
the numbers happen to come out close.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx

from ops.onnx.checks import CheckReport
from ops.onnx.graph import GraphIndex, attribute_values, op_key, tensor_type_text


def format_summary(
    model: onnx.ModelProto, report: CheckReport, path: Path | None = None, exporter: str = "dynamo"
) -> str:
    route = report.route
    index = GraphIndex.of(model)
    opsets = ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in sorted(route.opset_imports.items()))
    lines = [
        f"{route.name} ({exporter} exporter)" + (f" -> {path}" if path else ""),
        f"  {route.summary}",
        f"  opsets: {opsets} | inputs: {_values(model.graph.input, index)} "
        f"| outputs: {_values(model.graph.output, index)}",
        f"  {len(model.graph.node)} nodes: {_counts(report.node_counts)}",
        f"  {report.initializer_count} initializers, all {report.parameter_count} parameters among them",
        f"  {len(report.groups)} norm(s), nodes in graph order:",
    ]
    width = max(len(p or "(module)") for p in report.groups)
    for path_name, nodes in report.groups.items():
        lines.append(f"    {(path_name or '(module)').ljust(width)}  {_norm_line(nodes, index)}")
    return "\n".join(lines)


def _values(values, index: GraphIndex) -> str:
    return ", ".join(f"{v.name} {tensor_type_text(v)}" for v in values if v.name not in index.initializers)


def _counts(counts: Counter) -> str:
    return ", ".join(f"{d + '::' if d else ''}{t} {n}" for (d, t), n in counts.most_common())


def _norm_line(nodes: list[onnx.NodeProto], index: GraphIndex) -> str:
    compute = [n for n in nodes if n.op_type != "Constant"]
    if not compute:
        return "(no nodes found)"
    x = compute[0].input[0]
    previous: set[str] = set()
    parts = []
    for node in compute:
        args = [_input_text(name, x, previous, index) for name in node.input]
        args += [f"{k}={_short(v)}" for k, v in attribute_values(node).items()]
        domain, op_type = op_key(node)
        parts.append(f"{domain + '::' if domain else ''}{op_type}({', '.join(args)})")
        previous = set(node.output)
    return f"X={x}: " + " -> ".join(parts)


def _input_text(name: str, x: str, previous: set[str], index: GraphIndex) -> str:
    if name == x:
        return "X"
    if name in previous:
        return "."
    value = index.constant(name)
    if value is None:
        return name
    if value.size <= 4:
        return _short(value)
    role = name.rsplit(".", 1)[-1] if name.endswith((".weight", ".bias")) or name in ("weight", "bias") else name
    return f"{role}{list(value.shape)}"


def _short(value: object) -> str:
    if isinstance(value, np.ndarray):
        flat = value.ravel().tolist()
        return _short(flat[0]) if value.ndim == 0 else "[" + ", ".join(_short(v) for v in flat) + "]"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_short(v) for v in value) + "]"
    return str(value)
