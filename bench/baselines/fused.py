"""``fused``: the custom op, allocating its output (``call``) or writing a preallocated buffer (``out``)."""

from __future__ import annotations

import torch

import ops  # noqa: F401  (loads the op library: registers torch.ops.myops.*)
from bench.registry import Variant, register
from bench.workloads import Case, OpCase


@register
class Fused:
    name = "fused"
    workloads = frozenset({"op", "model"})
    devices = frozenset({"cpu"})
    order = 10

    def variants(self, case: Case) -> list[Variant]:
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

        return [
            Variant("call", lambda: lambda: op(x, w, b, eps)),
            Variant("out", prepare_out, note="preallocated output buffer reused across calls"),
        ]
