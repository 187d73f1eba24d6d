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


@dataclass(frozen=True)
class CaseInfo:
    """What a row needs to know about its case (not its tensors)."""

    workload: str
    shape: tuple[int, ...]
    dtype: object
    bytes_moved: float

    @classmethod
    def of(cls, case) -> CaseInfo:
        return cls(case.workload, tuple(case.shape), case.dtype, float(case.bytes_moved))


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
        "timer_resolution_ns": resolution_ns,
        **env,
        "other_cpu_share": machine.other_cpu_share(timing.other_cpu_s, timing.wall_s),
        "note": note,
        **NOT_SERVING,
    }


def add_ratios(frame: pd.DataFrame) -> pd.DataFrame:
    """Fill copy_gbps/copy_share (same shape and dtype) and speedup_vs_unfused (same workload, shape, dtype)."""
    frame = frame.copy()
    copy = frame[(frame.workload == COPY_REFERENCE[0]) & (frame.baseline == COPY_REFERENCE[1]) & (frame.variant == COPY_REFERENCE[2])]
    copy_gbps = {(r.shape, r.dtype): r.gbps for r in copy.itertuples()}
    frame["copy_gbps"] = [copy_gbps.get((r.shape, r.dtype), math.nan) if not math.isnan(r.gbps) else math.nan for r in frame.itertuples()]
    frame["copy_share"] = frame["gbps"] / frame["copy_gbps"]
    unfused = frame[(frame.baseline == SPEEDUP_REFERENCE[0]) & (frame.variant == SPEEDUP_REFERENCE[1])]
    reference = {(r.workload, r.shape, r.dtype): r.median_us for r in unfused.itertuples()}
    frame["speedup_vs_unfused"] = [
        reference.get((r.workload, r.shape, r.dtype), math.nan) / r.median_us for r in frame.itertuples()
    ]
    return frame
