"""Where Inductor keeps the compiled baseline's graphs, and the one way that baseline compiles.

Both the ``compiled`` variant (bench/plan/baselines/compiled.py) and the ahead-of-run warm-up
(bench/plan/warm_compiles.py) compile through :func:`compile_now`, so they write and read the same cache
entries: Inductor's FX graph cache and AOT autograd's cache are keyed by the graph, the inputs' metadata, the
torch version and Inductor's configuration (compile_threads included), so a stale entry is never used.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from bench.plan.grid import Shape, shape_label
from env.paths import build_dir

if TYPE_CHECKING:  # torch and ops load where a graph is compiled, not where a folder is named
    import torch

_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"  # Inductor reads it on every cache access
INDUCTOR_CACHE = "bench-cache"  # under the build folder: the compiled graphs of every case, kept between runs


def cache_folder(workload: str, device: str, shape: Shape, dtype: torch.dtype) -> Path:
    """The case's own folder of Inductor's caches."""
    from ops.dtypes import dtype_name

    return folder_named(workload, device, shape, dtype_name(dtype))


def folder_named(workload: str, device: str, shape: Shape, dtype: str) -> Path:
    """:func:`cache_folder` of a dtype by its name (``float32``), without importing torch."""
    return build_dir() / INDUCTOR_CACHE / f"inductor-{workload}-{device}-{shape_label(shape)}-{dtype}"


def holds_graphs(folder: Path) -> bool:
    """Whether Inductor's FX graph cache in ``folder`` holds any entry (a graph compiled there before)."""
    graphs = folder / "fxgraph"
    return graphs.is_dir() and any(graphs.iterdir())


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


def compile_now(function: Callable, args: tuple, folder: Path) -> tuple[Callable, bool]:
    """``torch.compile`` of ``function`` (fullgraph, dynamic=False), compiled now by a call on ``args`` with the
    caches in ``folder``; returns the compiled function and whether the FX graph cache had it.

    Dynamo is reset first: no reuse across shapes, no silent fall-back to eager after the recompile limit.
    Inductor compiles in this process (compile_threads=1): its default pool of worker processes would import
    torch in the background on a 2-core machine and slow down whatever is timed next.
    """
    import torch
    import torch._dynamo
    import torch._inductor.config
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    compiled = torch.compile(function, fullgraph=True, dynamic=False)
    hits = counters["inductor"]["fxgraph_cache_hit"]
    with _inductor_cache(folder), torch._inductor.config.patch(compile_threads=1):
        compiled(*args)
    return compiled, counters["inductor"]["fxgraph_cache_hit"] > hits
