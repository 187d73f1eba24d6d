"""``native``: torch's ``F.rms_norm`` plus the bias add - what a user would pick instead of the custom op."""

from __future__ import annotations

from bench.registry import Variant, register
from bench.workloads import Case, OpCase
from ops.norms import native_norm


@register
class Native:
    name = "native"
    workloads = frozenset({"op", "model"})

    def variants(self, case: Case) -> list[Variant]:
        if isinstance(case, OpCase):
            x, w, b, eps = case.x, case.weight, case.bias, case.eps
            return [Variant("call", lambda: lambda: native_norm(x, w, b, eps))]
        return [Variant("call", lambda: case.forward_call("native"))]
