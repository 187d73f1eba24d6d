"""The machine's limits, measured in the same run as the baselines.

  * copy bandwidth, at every op-level shape, two ways: ``dst.copy_(x)`` into a
    preallocated buffer - the most a norm writing into a caller's buffer (which
    also reads x once and writes y once) can hope for - and ``x.clone()``, a copy
    into a fresh output - the most a norm allocating its output can hope for:
    a benchmark process maps every block of 128 KiB and more afresh
    (bench/measure/allocator.py), so at those sizes every call pays the page faults of
    its new output, whatever the kernel does; on
    CUDA both are device-to-device copies of the same bytes;
  * CPU dispatch floor: the cheapest call through each runtime - a no-op torch op
    (``aten.alias``: dispatcher in and out, a view, no data touched) and an ONNX
    Runtime ``Identity`` graph on one element with IO binding - and this op's own
    out call on one row of 16 elements: its five arguments through ``torch.ops``,
    the dispatcher and the op's checks, around a kernel with next to nothing to
    do, what the op's out variant costs at any shape before its kernel's work;
  * CUDA launch floor: an empty kernel launched from Python, and the same kernel
    replayed from a CUDA graph (the device's own per-kernel cost).
They run through the same verify-then-time path as the baselines and land in
the report as rows with workload ``limit``; the report's copy_share and
vs_launch_floor are ratios to them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from bench.measure.placement import NATURAL
from bench.measure.timing import GRAPH_CALLS, capture_cuda_graph
from bench.plan.registry import Prepared, Variant
from bench.plan.workloads import OpCase
from ops.reference import EPS, Tolerance, make_inputs, reference_norm, tolerance

EXACT = Tolerance(0.0, 0.0, "a copy or an identity must be exact")


@dataclass
class LimitCase:
    shape: tuple[int, ...]
    dtype: torch.dtype
    x: Tensor
    bytes_moved: float
    workdir: Path
    tolerance: Tolerance = EXACT
    device: str = "cpu"
    layout: str = NATURAL  # a copy's is its case's: it reads the op's x, as the op does
    workload: str = field(default="limit", init=False)

    def reference(self) -> Tensor:
        # A copy must be exact: x itself is the reference (widening to float64 is exact, and made 512 MiB
        # for every variant at the largest shape). Verification compares in float64 a chunk at a time.
        return self.x


def copy_limits(case: OpCase) -> list[tuple[LimitCase, str, Variant]]:
    x = case.x
    limit = LimitCase(
        shape=case.shape,
        dtype=case.dtype,
        x=x,
        bytes_moved=2.0 * x.numel() * x.element_size(),
        workdir=case.workdir,
        device=case.device,
        layout=case.layout,
    )

    def prepare():
        dst = torch.full_like(x, float("nan"))
        return lambda: dst.copy_(x)

    where = "device-to-device " if case.device != "cpu" else ""
    return [
        (
            limit,
            "copy",
            Variant(
                "into_preallocated",
                prepare,
                note=f"{where}dst.copy_(x), dst allocated once; bytes = read x + write dst",
            ),
        ),
        (
            limit,
            "copy",
            Variant(
                "fresh_output",
                lambda: x.clone,
                note=f"{where}x.clone(): a new output every call, as an allocating op; bytes = read x + write it",
            ),
        ),
    ]


@dataclass
class OneRowCase(LimitCase):
    """The fused op on one short row: verified against the float64 norm."""

    weight: Tensor = field(default_factory=lambda: torch.empty(0))
    bias: Tensor = field(default_factory=lambda: torch.empty(0))

    def reference(self) -> Tensor:
        return reference_norm(self.x, self.weight, self.bias, EPS)


ONE_ROW_SHAPE = (1, 16)


def dispatch_floor(workdir: Path) -> list[tuple[LimitCase, str, Variant]]:
    x = torch.randn(1)
    limit = LimitCase(shape=(1,), dtype=torch.float32, x=x, bytes_moved=math.nan, workdir=workdir)
    alias = torch.ops.aten.alias.default
    row, weight, bias = make_inputs(ONE_ROW_SHAPE, seed=1)
    one_row = OneRowCase(
        shape=ONE_ROW_SHAPE,
        dtype=torch.float32,
        x=row,
        bytes_moved=math.nan,
        workdir=workdir,
        tolerance=tolerance(torch.float32),
        weight=weight,
        bias=bias,
    )
    return [
        (
            limit,
            "dispatch",
            Variant("torch_noop", lambda: lambda: alias(x), note="torch.ops.aten.alias.default: no data touched"),
        ),
        (
            limit,
            "dispatch",
            Variant(
                "ort_identity_iobinding",
                lambda: _ort_identity(x, workdir),
                note="ONNX Identity graph, IO binding, output buffer reused",
            ),
        ),
        (
            one_row,
            "dispatch",
            Variant(
                "fused_out_one_row",
                lambda: _fused_out(one_row),
                note="torch.ops.myops.fused_norm_out.default on one row of 16 float32, output buffer reused",
            ),
        ),
    ]


def _fused_out(case: OneRowCase):
    import ops  # noqa: F401  (loads the op library: registers torch.ops.myops.*)

    op_out = torch.ops.myops.fused_norm_out.default
    out = torch.full_like(case.x, float("nan"))  # verification proves every element is written

    def call():
        op_out(case.x, case.weight, case.bias, EPS, out)
        return out

    return call


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


def launch_floor(workdir: Path, device: str = "cuda") -> list[tuple[LimitCase, str, Variant]]:
    """The cheapest kernel on ``device``: launched from Python, and replayed from a CUDA graph."""
    x = torch.zeros(1, device=device)
    limit = LimitCase(shape=(1,), dtype=torch.float32, x=x, bytes_moved=math.nan, workdir=workdir, device=device)

    def empty_kernel():
        sleep = torch.cuda._sleep  # a kernel that spins for the given cycles: 0 makes it empty

        def call():
            sleep(0)
            return x

        return call

    def empty_graph():
        return Prepared(capture_cuda_graph(empty_kernel(), GRAPH_CALLS, poison=False), calls=GRAPH_CALLS)

    return [
        (
            limit,
            "launch",
            Variant("empty_kernel", empty_kernel, note="torch.cuda._sleep(0): one empty kernel per call"),
        ),
        (
            limit,
            "launch",
            Variant(
                "empty_kernel_graph",
                empty_graph,
                note=f"{GRAPH_CALLS} empty kernels in one CUDA graph; time per kernel",
            ),
        ),
    ]
