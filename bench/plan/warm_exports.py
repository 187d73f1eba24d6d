"""Export the ``ort`` baseline's modules for a run before its processes start, while Inductor's graphs compile.

A run's first process used to make every ONNX export its ORT variants load (36 on the CPU grid, 16-19 s of that
process on a 2-core VM); the later processes found the files in the run's shared workdir. The benchmark task now
calls :func:`export_ahead` right after the libraries are built: Inductor's warm-up (bench/plan/warm_compiles.py)
keeps one core busy for 10-15 s more, and the exports take the other. The files land where the ORT baseline looks
for them (bench/plan/baselines/ort.py: one file per workload, hidden size, dtype and route), with the seconds
each took beside it, so every process reports the export in its ORT rows' setup time.

An export depends on the workload, the hidden size and the dtype only (the weights are drawn from the hidden size
and the seed), so a case of one row stands for every shape of its hidden size: no full-size input is built here.
A run that selects jobs or rows (a gate's confirmation, an A/B) leaves its exports to its processes.
"""

from __future__ import annotations

import time
from pathlib import Path

from bench.plan.options import BenchOptions

MODEL_WORKLOAD = "model"


def export_cases(options: BenchOptions, workdir: Path) -> list:
    """One small case per module the run's CPU ORT variants export, in the order the run meets them."""
    from bench.plan.grid import GRIDS
    from bench.plan.registry import select
    from bench.plan.workloads import AddNormCase, ModelCase, OpCase
    from ops.dtypes import parse_dtypes

    devices = {d.strip() for d in options.device.split(",")}
    if options.jobs is not None or options.rows is not None or not devices & {"all", "cpu"}:
        return []
    ort = next((b for b in select(options.baseline) if b.name == "ort"), None)
    if ort is None:
        return []
    grid = GRIDS["cpu"]
    op_shapes, add_norm_shapes = grid.run_shapes(options.quick, options.op_shapes, options.add_norm_shapes)
    batches = options.model_batches if options.model_batches is not None else grid.batches(options.quick)
    cases = []
    for dtype in parse_dtypes(options.dtype or grid.dtypes):
        if dtype.numpy is None:  # ORT's Python feed type is numpy: the baseline skips this dtype
            continue
        hidden = {
            "op": sorted({shape[-1] for shape in op_shapes}) if "op" in ort.workloads else [],
            "add_norm": sorted({shape[-1] for shape in add_norm_shapes}) if "add_norm" in ort.workloads else [],
        }
        cases += [OpCase.create((1, h), dtype.torch, workdir) for h in hidden["op"]]
        cases += [AddNormCase.create((1, h), dtype.torch, workdir) for h in hidden["add_norm"]]
        if batches and MODEL_WORKLOAD in ort.workloads:  # every batch runs one model: one export serves them all
            name, batch, seq = batches[0]
            cases.append(ModelCase.create(name, batch, seq, dtype.torch, workdir))
    return cases


def export_ahead(options: BenchOptions, workdir: Path) -> str | None:
    """Export every module of :func:`export_cases` into ``workdir``; a line saying how it went (None: nothing to
    export). A module that fails here is left to the run, whose ORT variant then reports the failure as its own."""
    from bench.plan.baselines.ort import export_ahead as export_case

    began = time.perf_counter()
    cases = export_cases(options, workdir)
    if not cases:
        return None
    failed = []
    for case in cases:
        try:
            export_case(case)
        except Exception as error:  # the run's own attempt reports it, with the row it belongs to
            failed.append(f"{case.workload} {case.shape[-1]}: {type(error).__name__}")
    made = len(cases) - len(failed)
    line = (
        f"ONNX exports: {made} of {len(cases)} modules exported by every route in {time.perf_counter() - began:.1f} s"
    )
    return line + (f"; left to the run: {', '.join(failed)}" if failed else "")
