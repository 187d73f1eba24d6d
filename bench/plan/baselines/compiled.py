"""``compiled``: ``torch.compile`` of the unfused composition (Inductor: a C++ kernel on the CPU, Triton on CUDA).

On the residual add + norm workload it compiles the add and the composition
together (Inductor fuses them as it sees fit).

The compile happens in ``prepare`` (reported as setup_s), never in the timed
loop. It is a cold compile every time: Dynamo is reset (no reuse across shapes,
no silent fall-back to eager after the recompile limit) and Inductor gets an
empty cache folder of its own, so setup_s does not depend on earlier runs.
Inductor compiles in this process (compile_threads=1): its default pool of
worker processes would import torch in the background on a 2-core machine and
slow down whatever is timed next.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.plan.grid import shape_label
from bench.plan.registry import Variant, register
from bench.plan.workloads import AddNormCase, Case, OpCase
from ops.dtypes import dtype_name
from ops.norms import add_then, unfused_norm

_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"  # Inductor reads it on every cache access


@contextmanager
def _inductor_cache(folder: Path) -> Iterator[None]:
    before = os.environ.get(_CACHE_ENV)
    os.environ[_CACHE_ENV] = str(folder)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_CACHE_ENV, None)
        else:
            os.environ[_CACHE_ENV] = before


@register
class Compiled:
    name = "compiled"
    workloads = frozenset({"op", "add_norm"})
    devices = frozenset({"cpu", "cuda"})
    order = 30

    def variants(self, case: Case) -> list[Variant]:
        # Imported here, not at the top: Dynamo and Inductor take 2 s to import, and every process that plans a
        # grid imports this module (an A/B run's second stage plans a few rows in 24 fresh processes). Not in
        # prepare either: setup_s is the compile's time.
        import torch._dynamo
        import torch._inductor.config

        assert isinstance(case, (OpCase, AddNormCase))
        if isinstance(case, AddNormCase):
            function, args = add_then(unfused_norm), (case.x, case.residual, case.weight, case.bias, case.eps)
        else:
            function, args = unfused_norm, (case.x, case.weight, case.bias, case.eps)
        folder = f"inductor-{case.workload}-{case.device}-{shape_label(case.shape)}-{dtype_name(case.dtype)}"
        cache = case.workdir / folder

        def prepare():
            torch._dynamo.reset()
            compiled = torch.compile(function, fullgraph=True, dynamic=False)
            with _inductor_cache(cache), torch._inductor.config.patch(compile_threads=1):
                compiled(*args)  # compiles now, so setup_s is the (cold) compile time
            return lambda: compiled(*args)

        return [Variant("call", prepare, note="inductor, fullgraph, dynamic=False; setup_s = cold compile time")]
