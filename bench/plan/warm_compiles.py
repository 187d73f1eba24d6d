"""Fill the ``compiled`` baseline's Inductor caches for a run's CPU grid while the libraries build.

``python -m bench.plan.warm_compiles --threads N WORKLOAD:SHAPE ...`` compiles the unfused composition (workload
op) or the add then the composition (workload add_norm) at each shape, in float32, into the folders the
benchmark reads (bench/plan/inductor_cache.py); :func:`start` and :func:`finish` run it beside a benchmark's
build. A fresh checkout's first benchmark process then loads every graph instead of compiling it: its first
cold compile took 9-15 s (Inductor's CPU checks compile and run test programs once per cache folder and
process), each later one 0.7-0.9 s.

The libraries are still being built when this runs, so it must not load them: the pure-Python modules of
``ops`` are imported without running ``ops/__init__.py``. It runs at a lower CPU priority than the build (the
build's compiles keep their cores; this takes what they leave idle).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
import types
from pathlib import Path

NICENESS = 10
LOG = "warm_compiles.log"  # in the build folder
WORKLOADS = ("op", "add_norm")
# The one dtype the warm-up compiles: the CPU grid's default (bench/plan/grid.py), what a plain run measures. A run
# of other dtypes compiles its graphs in its first process.
DTYPE = "float32"
WAIT_S = 600  # a full grid's graphs take about 60 s beside a build: far past it, something hangs


def _ops_without_library() -> None:
    """Make ``ops.<module>`` importable without ``ops/__init__.py``, which loads the library being built."""
    spec = importlib.util.find_spec("ops")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the ops package is not on the path")
    package = types.ModuleType("ops")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["ops"] = package


def warm(graphs: list[tuple[str, tuple[int, ...]]], threads: int) -> list[tuple[str, float, bool]]:
    """Compile each (workload, shape) graph; returns (label, seconds, whether the cache already had it) each."""
    import torch

    from bench.plan.grid import shape_label
    from bench.plan.inductor_cache import cache_folder, compile_now
    from ops.norms import add_then, unfused_norm
    from ops.reference import EPS

    torch.set_num_threads(threads)
    done = []
    for workload, shape in graphs:
        # Only the inputs' metadata is in the cache key: shape, dtype, strides, device.
        dtype = getattr(torch, DTYPE)
        x, weight, bias = (torch.randn(size, dtype=dtype) for size in (shape, shape[-1], shape[-1]))
        if workload == "op":
            function, args = unfused_norm, (x, weight, bias, EPS)
        else:
            function, args = add_then(unfused_norm), (x, torch.randn(shape, dtype=dtype), weight, bias, EPS)
        started = time.perf_counter()
        _, cached = compile_now(function, args, cache_folder(workload, "cpu", shape, dtype))
        done.append((f"{workload} {shape_label(shape)}", time.perf_counter() - started, cached))
    return done


def _graph(argument: str) -> tuple[str, tuple[int, ...]]:
    from bench.plan.grid import parse_shape

    workload, _, shape = argument.partition(":")
    if workload not in WORKLOADS:
        raise argparse.ArgumentTypeError(
            f"a graph is WORKLOAD:SHAPE with WORKLOAD one of {WORKLOADS}, got {argument!r}"
        )
    return workload, parse_shape(shape, "a graph's shape")


def start(options) -> subprocess.Popen | None:
    """Start the warm-up for a run of ``options`` (bench/plan/options.py) in the background, or None where the run
    compiles nothing on the CPU in DTYPE (another baseline or device, another dtype)."""
    from bench.plan.grid import GRIDS, shape_label
    from bench.plan.inductor_cache import folder_named, holds_graphs
    from bench.plan.options import default_threads

    grid = GRIDS["cpu"]
    devices = {d.strip() for d in options.device.split(",")}
    if (
        options.baseline not in ("all", "compiled")
        or not devices & {"all", "cpu"}
        or (options.dtype or grid.dtypes) != DTYPE
    ):
        return None
    shapes, add_norm = grid.run_shapes(options.quick, options.op_shapes, options.add_norm_shapes)
    # Graphs an earlier run compiled are left to the first process, which loads them in about 0.1 s each after
    # its first: warming them too made a run whose libraries were up to date wait 10 s for ten loads.
    graphs = [
        f"{workload}:{shape_label(s)}"
        for workload, run in (("op", shapes), ("add_norm", add_norm))
        for s in run
        if not holds_graphs(folder_named(workload, "cpu", s, DTYPE))
    ]
    if not graphs:
        return None
    from env.paths import build_dir

    log = build_dir() / LOG
    log.parent.mkdir(parents=True, exist_ok=True)
    threads = options.threads or default_threads()
    command = [sys.executable, "-m", "bench.plan.warm_compiles", "--threads", str(threads), *graphs]
    with open(log, "w") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=Path(__file__).parents[2])


def stop(process: subprocess.Popen | None) -> None:
    """End the warm-up early (the build failed: nothing will be timed)."""
    if process is not None and process.poll() is None:
        process.kill()
        process.wait()


def finish(process: subprocess.Popen | None) -> str | None:
    """Wait for the warm-up to end (nothing may compile beside a timed call); a line saying how it went."""
    if process is None:
        return None
    from env.paths import build_dir

    log = build_dir() / LOG
    try:
        code = process.wait(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        stop(process)
        return f"Inductor's caches: the warm-up took over {WAIT_S} s and was stopped (see {log})"
    if code:
        return f"Inductor's caches: the warm-up failed (exit {code}, see {log}); the first process compiles cold"
    graphs = [line for line in log.read_text().splitlines() if line.endswith(("(compiled)", "(already cached)"))]
    compiled = sum(line.endswith("(compiled)") for line in graphs)
    return f"Inductor's caches: {compiled} of {len(graphs)} graphs compiled while the libraries built ({log})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("graphs", nargs="+", type=_graph, metavar="WORKLOAD:SHAPE")
    args = parser.parse_args(argv)
    os.nice(NICENESS)
    _ops_without_library()
    for label, seconds, cached in warm(args.graphs, args.threads):
        print(f"{label}: {seconds:.1f} s ({'already cached' if cached else 'compiled'})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
