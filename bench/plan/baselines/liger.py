"""``liger``: the Triton RMSNorm of liger-kernel plus the bias add - the fused norm GPU users pick today.

CUDA only (Triton kernels). Where liger-kernel or Triton is not importable,
every case is skipped with the import error as the reason.
"""

from __future__ import annotations

import functools

from bench.plan.registry import Unsupported, Variant, register
from bench.plan.workloads import Case, OpCase


@functools.cache
def _rms_norm():
    """liger's autograd function, or the reason it cannot be imported."""
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    except Exception as error:  # ImportError, or Triton failing to initialise without a GPU
        return None, f"liger-kernel is not importable here ({type(error).__name__}: {error})"
    return LigerRMSNormFunction, ""


@register
class Liger:
    name = "liger"
    workloads = frozenset({"op"})
    devices = frozenset({"cuda"})
    order = 35

    def variants(self, case: Case) -> list[Variant]:
        function, why = _rms_norm()
        if function is None:
            raise Unsupported(why)
        assert isinstance(case, OpCase)
        x, w, b, eps = case.x, case.weight, case.bias, case.eps
        # casting_mode "llama": rstd in float32, the normalised x cast back before the weight (as the op rounds once).
        return [
            Variant(
                "call", lambda: lambda: function.apply(x, w, eps) + b, note="LigerRMSNormFunction (Triton) + bias add"
            )
        ]
