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
How it compiles and where the caches live: bench/plan/inductor_cache.py.
A benchmark run fills the caches of its grid while the libraries build
(bench/plan/warm_compiles.py), so a fresh checkout's first process loads them.
"""

from __future__ import annotations

from bench.plan.inductor_cache import cache_folder, compile_now
from bench.plan.registry import Prepared, Variant, register
from bench.plan.workloads import AddNormCase, Case, OpCase
from ops.norms import add_then, unfused_norm


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
        import torch._dynamo  # noqa: F401
        import torch._inductor.config  # noqa: F401

        assert isinstance(case, (OpCase, AddNormCase))
        if isinstance(case, AddNormCase):
            function, args = add_then(unfused_norm), (case.x, case.residual, case.weight, case.bias, case.eps)
        else:
            function, args = unfused_norm, (case.x, case.weight, case.bias, case.eps)
        folder = cache_folder(case.workload, case.device, case.shape, case.dtype)

        def prepare():
            compiled, warm = compile_now(function, args, folder)  # now, so setup_s is the compile time
            return Prepared(
                lambda: compiled(*args),
                "inductor, fullgraph, dynamic=False; setup_s = "
                + ("compile from Inductor's FX graph cache (trace, load)" if warm else "cold compile time"),
            )

        return [Variant("call", prepare, note="inductor, fullgraph, dynamic=False")]
