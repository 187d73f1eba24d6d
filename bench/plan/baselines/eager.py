"""Eager torch compositions, one class for two baselines that differ only in the function they call.

* ``unfused``: the Python composition (pow, mean, add, rsqrt, mul, mul, add) - the reference for speed-ups;
* ``native``:  torch's ``F.rms_norm`` plus the bias add - what a user would pick instead of the custom op.

On the residual add + norm workload each runs the add as its own op first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from bench.plan.registry import Variant, register
from bench.plan.workloads import AddNormCase, Case, OpCase
from ops.norms import add_then, native_norm, unfused_norm


@dataclass(frozen=True)
class EagerNorm:
    name: str  # also the ``impl`` of ops.model.build_model for the model workload
    function: Callable[[Tensor, Tensor, Tensor, float], Tensor]
    order: int
    workloads: frozenset[str] = frozenset({"op", "add_norm", "model"})
    devices: frozenset[str] = frozenset({"cpu", "cuda"})

    def variants(self, case: Case) -> list[Variant]:
        if isinstance(case, AddNormCase):
            x, r, w, b, eps, add_norm = case.x, case.residual, case.weight, case.bias, case.eps, add_then(self.function)
            return [Variant("call", lambda: lambda: add_norm(x, r, w, b, eps), note="x + residual, then the norm")]
        if not isinstance(case, OpCase):
            return [Variant("call", lambda: case.forward_call(self.name))]
        x, w, b, eps, function = case.x, case.weight, case.bias, case.eps, self.function
        return [Variant("call", lambda: lambda: function(x, w, b, eps))]


register(EagerNorm("unfused", unfused_norm, order=0))  # first: every speed-up is relative to it
register(EagerNorm("native", native_norm, order=20))
