"""``compiled``: ``torch.compile`` of the unfused composition (Inductor: a C++ kernel on the CPU, Triton on CUDA).

On the residual add + norm workload it compiles the add and the composition
together (Inductor fuses them as it sees fit).

The compile happens in ``prepare`` (reported as setup_s), never in the timed
loop. Dynamo is reset before each (no reuse across shapes, no silent
fall-back to eager after the recompile limit), so every process traces again;
Inductor's FX graph cache and AOT autograd's cache live in a folder per case
under ``<build>/bench-cache/`` (INDUCTOR_CACHE), kept between runs: set-up is
paid once, not in every process of every run. Both caches are keyed by the
graph, the torch version and Inductor's configuration, so a stale entry is
never used. The note says whether this process's compile hit the cache or
compiled cold; setup_s is its time either way.
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
from bench.plan.registry import Prepared, Variant, register
from bench.plan.workloads import AddNormCase, Case, OpCase
from env.paths import build_dir
from ops.dtypes import dtype_name
from ops.norms import add_then, unfused_norm

_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"  # Inductor reads it on every cache access
INDUCTOR_CACHE = "bench-cache"  # under the build folder: the compiled graphs of every case, kept between runs


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
        cache = build_dir() / INDUCTOR_CACHE / folder

        def prepare():
            from torch._dynamo.utils import counters

            torch._dynamo.reset()
            compiled = torch.compile(function, fullgraph=True, dynamic=False)
            hits = counters["inductor"]["fxgraph_cache_hit"]
            with _inductor_cache(cache), torch._inductor.config.patch(compile_threads=1):
                compiled(*args)  # compiles now, so setup_s is the compile time
            warm = counters["inductor"]["fxgraph_cache_hit"] > hits
            return Prepared(
                lambda: compiled(*args),
                "inductor, fullgraph, dynamic=False; setup_s = "
                + ("compile from Inductor's FX graph cache (trace, load)" if warm else "cold compile time"),
            )

        return [Variant("call", prepare, note="inductor, fullgraph, dynamic=False")]
