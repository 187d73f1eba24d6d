"""``unfused``: the eager Python composition (pow, mean, add, rsqrt, mul, mul, add) - the reference for speed-ups."""

from __future__ import annotations

from bench.registry import Variant, register
from bench.workloads import Case, OpCase
from ops.norms import unfused_norm


@register
class Unfused:
    name = "unfused"
    workloads = frozenset({"op", "model"})

    def variants(self, case: Case) -> list[Variant]:
        if isinstance(case, OpCase):
            x, w, b, eps = case.x, case.weight, case.bias, case.eps
            return [Variant("call", lambda: lambda: unfused_norm(x, w, b, eps))]
        return [Variant("call", lambda: case.forward_call("unfused"))]
