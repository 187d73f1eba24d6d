"""Block-by-block comparison: expose each block's output in the ONNX graph.

A block's output is the input X of the next norm (the next block's norm1, or
the final norm after the last block), whatever the route; in a model whose
residual adds are folded into the norms (impl ``fused_add``) it is the sum
that next norm returns (its residual Add's output, or the second output of a
``fused_add_norm`` node). The exported file
names its norms (``fusedbench.norms`` metadata), so the value is found by
reading, not guessed. Those values are added as extra graph outputs; ORT
keeps a graph output intact through its optimisations, so what comes back is
the block's real output.
"""

from __future__ import annotations

import json

import onnx
import torch
from torch import Tensor

from ops.model import SequenceModel
from ops.onnx.graph import norm_groups, op_key
from ops.onnx.routes import CUSTOM_ADD_OP_TYPE, CUSTOM_DOMAIN


def block_output_names(model: onnx.ModelProto, layers: int) -> list[str]:
    """The ONNX value names of blocks 0..layers-1's outputs."""
    stamped = {p.key: p.value for p in model.metadata_props}.get("fusedbench.norms")
    if stamped is None:
        raise ValueError("the ONNX file has no fusedbench.norms metadata: export it with ops.onnx.export.export_model")
    groups = norm_groups(model, json.loads(stamped))
    followers = [f"blocks.{i + 1}.norm1" for i in range(layers - 1)] + ["final_norm"]
    names = []
    for block, follower in enumerate(followers):
        nodes = [n for n in groups.get(follower, []) if n.op_type != "Constant"]
        if not nodes:
            raise ValueError(f"no nodes of {follower} in the graph: cannot locate block {block}'s output")
        names.append(_block_output(nodes))
    return names


def _block_output(nodes: list[onnx.NodeProto]) -> str:
    """What the block hands its follower norm: the norm's input, or, where the norm adds the residual first,
    the sum (a plain norm's first node is Pow, RMSNormalization or fused_norm, never Add)."""
    first = nodes[0]
    if op_key(first) == (CUSTOM_DOMAIN, CUSTOM_ADD_OP_TYPE):
        return first.output[1]
    if first.op_type == "Add":
        return first.output[0]
    return first.input[0]


def with_extra_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """A copy of ``model`` whose graph also outputs ``names`` (after the original outputs)."""
    edited = onnx.ModelProto()
    edited.CopyFrom(model)
    recorded = {v.name: v for v in (*edited.graph.value_info, *edited.graph.input)}
    present = {v.name for v in edited.graph.output}
    elem_type = edited.graph.input[0].type.tensor_type.elem_type
    for name in names:
        if name in present:
            continue
        if name in recorded:
            edited.graph.output.append(recorded[name])
        else:
            # The TorchScript exporter records fewer intermediate types: the
            # dtype is the model's, the shape is left for ORT to find.
            edited.graph.output.append(onnx.helper.make_tensor_value_info(name, elem_type, None))
    return edited


def torch_block_outputs(model: SequenceModel, x: Tensor) -> tuple[Tensor, list[Tensor]]:
    """The model's output and each block's output, from forward hooks.

    With the residual adds folded into the norms the blocks' own forward is
    not called: each block's output is the sum its follower norm returns.
    """
    captured: list[Tensor] = []
    if model.impl == "fused_add":
        followers = [block.norm1 for block in list(model.blocks)[1:]] + [model.final_norm]
        hooks = [
            norm.register_forward_hook(lambda _m, _i, out: captured.append(out[1].detach().clone()))
            for norm in followers
        ]
    else:
        hooks = [
            block.register_forward_hook(lambda _m, _i, out: captured.append(out.detach().clone()))
            for block in model.blocks
        ]
    try:
        with torch.no_grad():
            y = model(x)
    finally:
        for hook in hooks:
            hook.remove()
    return y, captured
