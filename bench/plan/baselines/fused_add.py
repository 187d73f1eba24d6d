"""``fused_add``: the fused residual add + norm op (``torch.ops.myops.fused_add_norm``).

* ``call``: the functional op, which allocates both outputs (the norm and the sum);
* ``inplace``: ``fused_add_norm_inplace``, which writes the norm into x and the
  sum into residual, as an inference engine runs it. Every call overwrites its
  inputs, so the timed calls run on the previous call's results: the residual
  grows by one normalised row per call and x is the last norm. The kernel does
  the same work whatever the values (no data-dependent path; no subnormals),
  so the time is that of a call on fresh inputs. The copies it starts from are
  made in ``prepare``, outside the timed loop, and the first call is verified.
On the model workload: the sequence model with its residual adds folded into
the norms (``build_model("fused_add")``). CPU and CUDA kernels.
"""

from __future__ import annotations

import torch

import ops  # noqa: F401  (loads the op library: registers torch.ops.myops.*)
from bench.measure.placement import placed
from bench.plan.registry import Variant, register
from bench.plan.workloads import AddNormCase, Case


@register
class FusedAdd:
    name = "fused_add"
    workloads = frozenset({"add_norm", "model"})
    devices = frozenset({"cpu", "cuda"})
    order = 12  # beside fused, which on this workload runs the add and the norm apart

    def variants(self, case: Case) -> list[Variant]:
        if not isinstance(case, AddNormCase):
            return [Variant("call", lambda: case.forward_call("fused_add"), note="residual adds folded into the norms")]
        x, r, w, b, eps = case.x, case.residual, case.weight, case.bias, case.eps
        op, op_inplace = torch.ops.myops.fused_add_norm.default, torch.ops.myops.fused_add_norm_inplace.default

        def prepare_inplace():
            x_buffer, r_buffer = placed(x), placed(r)  # copies, at this process's offset into a page

            def call():
                op_inplace(x_buffer, r_buffer, w, b, eps)
                return x_buffer, r_buffer

            return call

        return [
            Variant("call", lambda: lambda: op(x, r, w, b, eps)),
            Variant("inplace", prepare_inplace, note="x receives the norm, residual the sum; nothing allocated"),
        ]
