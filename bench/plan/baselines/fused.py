"""``fused``: the custom op, allocating its output (``call``) or writing a preallocated buffer (``out``).

On the residual add + norm workload: a separate ``x + residual``, then the op
(what a model without the fused add + norm runs); and ``inplace``, the same two
calls writing where ``fused_add_norm_inplace`` does (``residual += x``, then
the norm of the sum into x's buffer): its counterpart with nothing allocated,
so the pair is compared by the kernels' traffic rather than by the first-touch
page faults of fresh outputs.

On CUDA also ``graph``: GRAPH_CALLS calls captured in one CUDA graph and
replayed, timed per call - the kernel's own time without the host's launch
cost, as a model captured in a graph runs it.
"""

from __future__ import annotations

import torch

import ops  # noqa: F401  (loads the op library: registers torch.ops.myops.*)
from bench.measure.placement import placed
from bench.measure.timing import GRAPH_CALLS, capture_cuda_graph
from bench.plan.registry import Prepared, Variant, register
from bench.plan.workloads import AddNormCase, Case, OpCase
from ops.norms import add_then, fused_norm


@register
class Fused:
    name = "fused"
    workloads = frozenset({"op", "add_norm", "model"})
    devices = frozenset({"cpu", "cuda"})
    order = 10

    def variants(self, case: Case) -> list[Variant]:
        if isinstance(case, AddNormCase):
            x, r, w, b, eps, add_norm = case.x, case.residual, case.weight, case.bias, case.eps, add_then(fused_norm)
            op_out = torch.ops.myops.fused_norm_out.default

            def prepare_inplace():
                # As fused_add's inplace variant: every call runs on the previous call's results.
                x_buffer, r_buffer = placed(x), placed(r)

                def call():
                    r_buffer.add_(x_buffer)
                    op_out(r_buffer, w, b, eps, x_buffer)
                    return x_buffer, r_buffer

                return call

            return [
                Variant("call", lambda: lambda: add_norm(x, r, w, b, eps), note="x + residual, then the fused op"),
                Variant(
                    "inplace",
                    prepare_inplace,
                    note="residual += x, then the fused op's out form into x; nothing allocated",
                ),
            ]
        if not isinstance(case, OpCase):
            return [Variant("call", lambda: case.forward_call("fused"))]
        x, w, b, eps = case.x, case.weight, case.bias, case.eps
        op, op_out = torch.ops.myops.fused_norm.default, torch.ops.myops.fused_norm_out.default

        def prepare_out():
            # NaN first: verification then proves the kernel wrote every element.
            out = torch.full_like(x, float("nan"))

            def call():
                op_out(x, w, b, eps, out)
                return out

            return call

        variants = [
            Variant("call", lambda: lambda: op(x, w, b, eps)),
            Variant("out", prepare_out, note="preallocated output buffer reused across calls"),
        ]
        if case.device == "cuda":
            graph = lambda: Prepared(capture_cuda_graph(lambda: op(x, w, b, eps)), calls=GRAPH_CALLS)  # noqa: E731
            variants.append(Variant("graph", graph, note=f"CUDA graph of {GRAPH_CALLS} calls, replayed; time per call"))
        return variants
