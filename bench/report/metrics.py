"""Report rows: the statistics of one measurement plus the ratios that need the whole run."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from bench.measure import machine
from bench.measure.placement import NATURAL
from bench.measure.timing import Timing, summarize
from bench.plan.grid import shape_label
from bench.report.schema import NOT_SERVING, SCHEMA_VERSION
from ops.dtypes import dtype_name

SPEEDUP_REFERENCE = ("unfused", "call")
# The cheapest call on each device (bench/plan/limits.py), first found wins; graph variants use the graph floor.
LAUNCH_FLOORS = (("launch", "empty_kernel"), ("dispatch", "torch_noop"))
GRAPH_FLOOR = ("launch", "empty_kernel_graph")
# The two copy limits (bench/plan/limits.py), by the variant name of their limit/copy row.
PREALLOCATED_COPY, FRESH_COPY = "into_preallocated", "fresh_output"
# Variants named "call" return a new tensor from torch's allocator each call: on the CPU, at large
# sizes, fresh pages from the OS, so their limit is the fresh-output copy (torch's CUDA allocator
# caches its blocks, so on a GPU every row keeps the preallocated copy). "out" and ORT's variants write into
# memory allocated once (a caller's buffer, a bound output, ORT's arena).
ALLOCATING_VARIANTS = frozenset({"call"})
# A fresh-output copy must fault at least this many pages per call for its extra time over the
# preallocated copy to give a cost per fault (below, allocator overhead would dominate).
MIN_FAULTS_FOR_COST = 64
# A row spending more than this share of its median serving page faults is page-fault bound.
PAGE_FAULT_BOUND = 0.5


@dataclass(frozen=True)
class CaseInfo:
    """What a row needs to know about its case (not its tensors)."""

    workload: str
    shape: tuple[int, ...]
    dtype: object
    bytes_moved: float
    device: str = "cpu"  # the report's name of the device: cpu, or the GPU's name
    layout: str = NATURAL  # where its inputs start in their pages (bench/measure/placement.py)

    @classmethod
    def of(cls, case, device: str = "cpu") -> CaseInfo:
        layout = getattr(case, "layout", NATURAL)  # a case that places nothing has its buffers as allocated
        return cls(case.workload, tuple(case.shape), case.dtype, float(case.bytes_moved), device, layout)


def measurement_row(
    case: CaseInfo,
    baseline: str,
    variant: str,
    note: str,
    timing: Timing,
    setup_s: float,
    resolution_ns: float,
    env: Mapping[str, object],
    rounds: int = 1,
    timer: str = "perf_counter",
) -> dict[str, object]:
    stats = summarize(timing.samples_us)
    bytes_moved = float(case.bytes_moved)
    return {
        "schema_version": SCHEMA_VERSION,
        "workload": case.workload,
        "shape": shape_label(case.shape),
        "dtype": dtype_name(case.dtype),
        "baseline": baseline,
        "variant": variant,
        **vars(stats),
        "rounds": rounds,
        "block": timing.block,
        "warmup": timing.warmup,
        "setup_s": setup_s,
        "bytes_moved": bytes_moved,
        # bytes per microsecond = 1e6 bytes/s; / 1e3 -> GB/s.
        "gbps": bytes_moved / stats.median_us / 1e3 if not math.isnan(bytes_moved) else math.nan,
        "copy_gbps": math.nan,
        "copy_share": math.nan,
        "speedup_vs_unfused": math.nan,
        "vs_launch_floor": math.nan,
        "timer_resolution_ns": resolution_ns,
        "timer": timer,
        **env,
        "device": case.device,
        "layout": case.layout,
        **machine.gpu_columns(case.device),
        "other_cpu_share": machine.other_cpu_share(timing.other_cpu_s, timing.wall_s),
        "minor_faults_per_call": timing.minor_faults_per_call,
        "page_fault_share": math.nan,
        "copy_limit": "",
        "note": note,
        **NOT_SERVING,
    }


def add_ratios(frame: pd.DataFrame) -> pd.DataFrame:
    """Fill the ratios that need other rows of the run, each within its device.

    copy_gbps/copy_share: against the copy at the same shape and dtype - the
    fresh-output copy for variants that allocate their output, the copy into a
    preallocated buffer for the rest (copy_limit names which); page_fault_share
    (see fault_cost_us); speedup_vs_unfused: same workload, shape, dtype and layout;
    vs_launch_floor: against the device's cheapest call.
    """
    frame = frame.copy()

    def rows(workload: str | None, baseline: str, variant: str) -> pd.DataFrame:
        hit = (frame.baseline == baseline) & (frame.variant == variant)
        return frame[hit & (frame.workload == workload)] if workload else frame[hit]

    copies = frame[(frame.workload == "limit") & (frame.baseline == "copy")]
    # A row's copy is the one at its own layout: it reads x where the row's x is.
    copy_gbps = {(r.shape, r.dtype, r.device, r.layout, r.variant): r.gbps for r in copies.itertuples()}
    limits = [
        "" if math.isnan(r.gbps) else FRESH_COPY if _allocates_fresh_pages(r) else PREALLOCATED_COPY
        for r in frame.itertuples()
    ]
    frame["copy_limit"] = limits
    frame["copy_gbps"] = [
        copy_gbps.get((r.shape, r.dtype, r.device, r.layout, limit), math.nan) if limit else math.nan
        for r, limit in zip(frame.itertuples(), limits, strict=True)
    ]
    frame["copy_share"] = frame["gbps"] / frame["copy_gbps"]
    share = (frame["minor_faults_per_call"] * fault_cost_us(frame) / frame["median_us"]).clip(upper=1.0)
    # Host faults x the CPU's cost per fault: meaningful for host-clock CPU rows only, not for CUDA-event times.
    frame["page_fault_share"] = share.where(frame["device"] == "cpu")
    reference = {
        (r.workload, r.shape, r.dtype, r.device, r.layout): r.median_us
        for r in rows(None, *SPEEDUP_REFERENCE).itertuples()
    }
    frame["speedup_vs_unfused"] = [
        reference.get((r.workload, r.shape, r.dtype, r.device, r.layout), math.nan) / r.median_us
        for r in frame.itertuples()
    ]
    floors: dict[str, float] = {}
    for baseline, variant in reversed(LAUNCH_FLOORS):  # the first listed overrides
        floors.update({r.device: r.median_us for r in rows("limit", baseline, variant).itertuples()})
    graph_floors = {r.device: r.median_us for r in rows("limit", *GRAPH_FLOOR).itertuples()}
    frame["vs_launch_floor"] = [
        r.median_us / (graph_floors if r.variant.endswith("graph") else floors).get(r.device, math.nan)
        for r in frame.itertuples()
    ]
    return frame


def _allocates_fresh_pages(row) -> bool:
    return row.device == "cpu" and row.workload in ("op", "add_norm") and row.variant in ALLOCATING_VARIANTS


def fault_cost_us(frame: pd.DataFrame) -> float:
    """Microseconds one page fault costs on this machine in this run; NaN when no copy faulted enough.

    The fresh-output copy and the copy into a preallocated buffer move the same
    bytes; the fresh one also gets new pages from the OS. Its extra time over its
    faults, per shape, is the cost of one fault (the kernel mapping and zeroing
    a page); the median over the shapes that fault enough is the run's estimate.
    """
    # Page faults are the host's: only CPU copies measure them.
    cpu = frame.device == "cpu"
    copies = frame[cpu & (frame.workload == "limit") & (frame.baseline == "copy")].set_index(
        ["shape", "dtype", "layout", "variant"]
    )
    costs = []
    for shape, dtype, layout, variant in copies.index:
        if variant != FRESH_COPY or (shape, dtype, layout, PREALLOCATED_COPY) not in copies.index:
            continue
        fresh = copies.loc[(shape, dtype, layout, FRESH_COPY)]
        preallocated = copies.loc[(shape, dtype, layout, PREALLOCATED_COPY)]
        if fresh.minor_faults_per_call >= MIN_FAULTS_FOR_COST:
            costs.append(max(0.0, fresh.median_us - preallocated.median_us) / fresh.minor_faults_per_call)
    return float(pd.Series(costs).median()) if costs else math.nan


def page_fault_bound(frame: pd.DataFrame) -> pd.Series:
    """Rows whose median is mostly the OS serving page faults, not the code under test."""
    return frame["page_fault_share"] > PAGE_FAULT_BOUND
