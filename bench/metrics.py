"""Report rows: the statistics of one measurement plus the ratios that need the whole run."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from bench import machine
from bench.report import NOT_SERVING, SCHEMA_VERSION
from bench.timing import Timing, summarize
from bench.workloads import dtype_name, shape_label

SPEEDUP_REFERENCE = ("unfused", "call")
COPY_REFERENCE = ("limit", "copy", "into_preallocated")
# The cheapest call on each device (bench/limits.py), first found wins; graph variants use the graph floor.
LAUNCH_FLOORS = (("launch", "empty_kernel"), ("dispatch", "torch_noop"))
GRAPH_FLOOR = ("launch", "empty_kernel_graph")


@dataclass(frozen=True)
class CaseInfo:
    """What a row needs to know about its case (not its tensors)."""

    workload: str
    shape: tuple[int, ...]
    dtype: object
    bytes_moved: float
    device: str = "cpu"  # the report's name of the device: cpu, or the GPU's name

    @classmethod
    def of(cls, case, device: str = "cpu") -> CaseInfo:
        return cls(case.workload, tuple(case.shape), case.dtype, float(case.bytes_moved), device)


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
        "other_cpu_share": machine.other_cpu_share(timing.other_cpu_s, timing.wall_s),
        "note": note,
        **NOT_SERVING,
    }


def add_ratios(frame: pd.DataFrame) -> pd.DataFrame:
    """Fill, within each device: copy_gbps/copy_share (same shape and dtype), speedup_vs_unfused
    (same workload, shape, dtype) and vs_launch_floor (the device's cheapest call)."""
    frame = frame.copy()

    def rows(workload: str | None, baseline: str, variant: str) -> pd.DataFrame:
        hit = (frame.baseline == baseline) & (frame.variant == variant)
        return frame[hit & (frame.workload == workload)] if workload else frame[hit]

    copy_gbps = {(r.shape, r.dtype, r.device): r.gbps for r in rows(*COPY_REFERENCE).itertuples()}
    frame["copy_gbps"] = [
        copy_gbps.get((r.shape, r.dtype, r.device), math.nan) if not math.isnan(r.gbps) else math.nan for r in frame.itertuples()
    ]
    frame["copy_share"] = frame["gbps"] / frame["copy_gbps"]
    reference = {(r.workload, r.shape, r.dtype, r.device): r.median_us for r in rows(None, *SPEEDUP_REFERENCE).itertuples()}
    frame["speedup_vs_unfused"] = [
        reference.get((r.workload, r.shape, r.dtype, r.device), math.nan) / r.median_us for r in frame.itertuples()
    ]
    floors: dict[str, float] = {}
    for baseline, variant in reversed(LAUNCH_FLOORS):  # the first listed overrides
        floors.update({r.device: r.median_us for r in rows("limit", baseline, variant).itertuples()})
    graph_floors = {r.device: r.median_us for r in rows("limit", *GRAPH_FLOOR).itertuples()}
    frame["vs_launch_floor"] = [
        r.median_us / (graph_floors if r.variant.endswith("graph") else floors).get(r.device, math.nan) for r in frame.itertuples()
    ]
    return frame
