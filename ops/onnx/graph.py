"""Read an exported ONNX graph: constants, producers, and which nodes belong to which norm.

Both exporters record the PyTorch module each node came from, in different
places: the dynamo exporter in the node's ``pkg.torch.onnx.name_scopes``
metadata (a list of module paths), the TorchScript exporter in the node name
(``/blocks.0/norm1/Pow``). ``norm_groups`` reads either, so the checks and the
summary can look at one norm at a time, whatever exporter wrote the file.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

_DYNAMO_SCOPES_KEY = "pkg.torch.onnx.name_scopes"


@dataclass
class GraphIndex:
    """Lookups over one graph: initializers, Constant-node values, producers, graph inputs."""

    model: onnx.ModelProto
    initializers: dict[str, np.ndarray] = field(default_factory=dict)
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    producers: dict[str, onnx.NodeProto] = field(default_factory=dict)
    graph_inputs: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, model: onnx.ModelProto) -> GraphIndex:
        index = cls(model=model)
        graph = model.graph
        index.initializers = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        for node in graph.node:
            for out in node.output:
                index.producers[out] = node
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                value = _constant_node_value(node)
                if value is not None:
                    index.constants[node.output[0]] = value
        index.graph_inputs = [v.name for v in graph.input if v.name not in index.initializers]
        return index

    def constant(self, name: str) -> np.ndarray | None:
        """The value of ``name`` if it is an initializer or a Constant node's output."""
        if name in self.initializers:
            return self.initializers[name]
        return self.constants.get(name)

    def value_types(self) -> dict[str, onnx.TypeProto]:
        """Types the file records (graph inputs, outputs, value_info), by value name."""
        graph = self.model.graph
        return {v.name: v.type for v in (*graph.input, *graph.value_info, *graph.output)}

    def is_constant(self, name: str) -> bool:
        return name == "" or name in self.initializers or name in self.constants


def _constant_node_value(node: onnx.NodeProto) -> np.ndarray | None:
    for attr in node.attribute:
        if attr.name == "value":
            return numpy_helper.to_array(attr.t)
        if attr.name == "value_float":
            return np.array(attr.f, dtype=np.float32)
        if attr.name == "value_floats":
            return np.array(list(attr.floats), dtype=np.float32)
        if attr.name == "value_int":
            return np.array(attr.i, dtype=np.int64)
        if attr.name == "value_ints":
            return np.array(list(attr.ints), dtype=np.int64)
    return None


def node_scopes(node: onnx.NodeProto) -> list[str]:
    """Module paths (``blocks.0``, ``blocks.0.norm1``, ...) the node was exported from; [] if unknown."""
    for prop in node.metadata_props:
        if prop.key == _DYNAMO_SCOPES_KEY:
            try:
                scopes = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                return []
            return [s for s in scopes if isinstance(s, str)]
    if node.name.startswith("/"):
        # TorchScript: "/blocks.0/norm1/Pow" -> ["", "blocks.0", "blocks.0.norm1"]
        parts = node.name.strip("/").split("/")[:-1]
        return [""] + [".".join(parts[: i + 1]) for i in range(len(parts))]
    return []


def norm_groups(model: onnx.ModelProto, norm_paths: list[str]) -> dict[str, list[onnx.NodeProto]]:
    """The nodes of each norm (by module path), in graph order.

    ``norm_paths`` are the paths of the Norm modules in the exported module;
    ``[""]`` when the exported module is itself a Norm (then every node is its).
    """
    groups: dict[str, list[onnx.NodeProto]] = {path: [] for path in norm_paths}
    for node in model.graph.node:
        if norm_paths == [""]:
            groups[""].append(node)
            continue
        scopes = node_scopes(node)
        for path in norm_paths:
            if path in scopes:
                groups[path].append(node)
                break
    return groups


def op_key(node: onnx.NodeProto) -> tuple[str, str]:
    """(domain, op_type) with the default domain spelled ""."""
    return ("" if node.domain == "ai.onnx" else node.domain, node.op_type)


def attribute_values(node: onnx.NodeProto) -> dict[str, object]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def tensor_type_text(value: onnx.ValueInfoProto) -> str:
    """``float32[batch, seq, 128]`` for a value's recorded type."""
    tensor = value.type.tensor_type
    if not value.type.HasField("tensor_type"):
        return "(no tensor type)"
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name if tensor.elem_type else "?"
    if not tensor.HasField("shape"):
        return f"{dtype}[?]"
    dims = [
        d.dim_param if d.HasField("dim_param") else str(d.dim_value) if d.HasField("dim_value") else "?"
        for d in tensor.shape.dim
    ]
    return f"{dtype}[{', '.join(dims)}]"
