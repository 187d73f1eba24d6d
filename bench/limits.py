"""The machine's limits, measured in the same run as the baselines.

  * copy bandwidth, at every op-level shape, two ways: ``dst.copy_(x)`` into a
    preallocated buffer - the most a norm writing into a caller's buffer (which
    also reads x once and writes y once) can hope for - and ``x.clone()``, a copy
    into a fresh output - the most a norm allocating its output can hope for:
    torch's allocator returns large blocks to the OS, so at large sizes every
    call pays the page faults of its new output, whatever the kernel does;
  * dispatch floor: the cheapest call through each runtime - a no-op torch op
    (``aten.alias``: dispatcher in and out, a view, no data touched) and an ONNX
    Runtime ``Identity`` graph on one element with IO binding.
They run through the same verify-then-time path as the baselines and land in
the report as rows with workload ``limit``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from bench.registry import Variant
from bench.workloads import OpCase


@dataclass
class LimitCase:
    shape: tuple[int, ...]
    dtype: torch.dtype
    x: Tensor
    bytes_moved: float
    workdir: Path
    tolerance: float = 0.0  # a copy or an identity must be exact
    workload: str = field(default="limit", init=False)

    def reference(self) -> Tensor:
        return self.x.double()


def copy_limits(case: OpCase) -> list[tuple[LimitCase, str, Variant]]:
    x = case.x
    limit = LimitCase(shape=case.shape, dtype=case.dtype, x=x, bytes_moved=2.0 * x.numel() * x.element_size(), workdir=case.workdir)

    def prepare():
        dst = torch.full_like(x, float("nan"))
        return lambda: dst.copy_(x)

    return [
        (limit, "copy", Variant("into_preallocated", prepare, note="dst.copy_(x), dst allocated once; bytes = read x + write dst")),
        (limit, "copy", Variant("fresh_output", lambda: x.clone, note="x.clone(): a new output every call, as an allocating op; bytes = read x + write it")),
    ]


def dispatch_floor(workdir: Path) -> list[tuple[LimitCase, str, Variant]]:
    x = torch.randn(1)
    limit = LimitCase(shape=(1,), dtype=torch.float32, x=x, bytes_moved=math.nan, workdir=workdir)
    alias = torch.ops.aten.alias.default
    return [
        (limit, "dispatch", Variant("torch_noop", lambda: lambda: alias(x), note="torch.ops.aten.alias.default: no data touched")),
        (limit, "dispatch", Variant("ort_identity_iobinding", lambda: _ort_identity(x, workdir), note="ONNX Identity graph, IO binding, output buffer reused")),
    ]


def _ort_identity(x: Tensor, workdir: Path):
    import onnx
    from onnx import TensorProto, helper

    from ops.ort.session import IOBoundRunner, OrtConfig, create_session

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "identity",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x.shape))],
    )
    # IR version 10 / opset 17: old enough for any ORT this project pins (onnx 1.23 would write IR 14).
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    path = workdir / "identity.onnx"
    onnx.save(model, path)
    session = create_session(path, OrtConfig(threads=torch.get_num_threads(), register_custom_ops=False))
    runner, feeds = IOBoundRunner(session), {"x": x.numpy()}
    for buffer in runner.run(feeds):  # binds the reused output; NaN it so verification proves it is rewritten
        buffer.fill(float("nan"))
    return lambda: runner.run(feeds)
