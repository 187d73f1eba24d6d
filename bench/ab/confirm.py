"""The second stage of an A/B run: the grid that measures the suspect rows again.

A row the first stage leaves INCONCLUSIVE with its estimate past a bound
(compare.suspects) is measured again in fresh pairs of processes, and judged on
those pairs alone. The grid here times just the suspect rows: not the other
variants of their jobs, and not the limits (a verdict reads a row's own time,
not its ratio to a copy), so a pair costs little more than its processes' start.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

from bench.measure.placement import NATURAL
from bench.plan.grid import GRIDS, parse_shape
from bench.plan.jobs import job_label, row_label
from bench.plan.options import BenchOptions

Key = tuple[str, ...]  # compare's row key: workload, shape, dtype, baseline, variant, device, layout


def _op_layouts(keys: Iterable[Key]) -> str:
    """BenchOptions.layouts for the op suspects: their one layout, else all."""
    layouts = {k[6] for k in keys if k[0] == "op"}
    return layouts.pop() if len(layouts) == 1 else "all"


def _model_batches(keys: Iterable[Key]) -> tuple[tuple[str, int, int], ...]:
    """The grid's model batches behind model rows (their shape reads batch x sequence x hidden)."""
    wanted = {(k[5], tuple(parse_shape(k[1], "shape")[:2])) for k in keys}
    found = []
    for device, prefix in sorted(wanted):
        grid = GRIDS[device]
        for name, batch, seq in dict.fromkeys(grid.batches(True) + grid.batches(False)):
            if (batch, seq) == prefix and (name, batch, seq) not in found:
                found.append((name, batch, seq))
    return tuple(found)


def confirm_options(options: BenchOptions, keys: list[Key]) -> BenchOptions:
    """``options`` narrowed to a grid that measures every row in ``keys`` (counted rows: op, add_norm, model).

    The op shapes are never empty: an empty override reads as "the grid's shapes"
    in this and older trees, and a REF must plan the same jobs as this checkout.
    With no op row among the suspects, the smallest op shape stands in (one job
    a baseline, cheap next to a process's start).
    """
    if not keys:
        raise ValueError("no rows to confirm")
    by_workload: dict[str, list[Key]] = {}
    for key in keys:
        by_workload.setdefault(key[0], []).append(key)
    unknown = set(by_workload) - {"op", "add_norm", "model"}
    if unknown:
        raise ValueError(f"cannot measure rows of workload(s) {sorted(unknown)} again")
    devices = list(dict.fromkeys(k[5] for k in keys))
    op_shapes = tuple(dict.fromkeys(parse_shape(k[1], "shape") for k in by_workload.get("op", [])))
    if not op_shapes:
        op_shapes = (min((s for d in devices for s in GRIDS[d].shapes(True)), key=math.prod),)
    return replace(
        options,
        baseline=",".join(dict.fromkeys(k[3] for k in keys)),
        dtype=",".join(dict.fromkeys(k[2] for k in keys)),
        device=",".join(devices),
        op_shapes=op_shapes,
        # None: none, once op shapes are given (left at its default, a REF without the option can take part).
        add_norm_shapes=tuple(dict.fromkeys(parse_shape(k[1], "shape") for k in by_workload["add_norm"]))
        if "add_norm" in by_workload
        else None,
        model_batches=_model_batches(by_workload.get("model", [])),
        budget_s=None,
        # Of that product, only the suspects' own jobs, and of those only the suspect rows: the rest would only
        # cost time. A REF without row lists falls back to the jobs (with their limits), one without those to
        # the product (bench/ab/driver.py).
        layouts=_op_layouts(keys),
        jobs=tuple(dict.fromkeys(job_label(k[0], k[1], k[2], k[3], k[5], k[6]) for k in keys)),
        rows=tuple(dict.fromkeys(row_label(job_label(k[0], k[1], k[2], k[3], k[5], k[6]), k[4]) for k in keys)),
    )


def describe(keys: list[Key]) -> str:
    return "; ".join(
        f"{k[3]}/{k[4]} {k[0]} {k[1]} {k[2]} {k[5]}" + (f" {k[6]}" if k[6] != NATURAL else "") for k in keys
    )
