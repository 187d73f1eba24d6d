"""Synthetic report histories: the fixtures of the tests and the scale benchmark's input.

Each report is a schema-5 CSV (the columns the store reads, but the layout that
schema 7 added: the store gives its rows the page offset) with, optionally,
its samples sidecar: per row, ROUNDS rounds of SAMPLES_PER_ROUND samples
drawn log-normally around the row's level, each round shifted by a round
effect (a process's state, as on a real machine). A history is a sequence of
commits measured on each machine; ``slowdown`` multiplies one row's level from
a given commit on (the injected regression).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bench.history.migrate import STORE_COLUMNS
from bench.history.sources import KEY_COLUMNS, SAMPLES_SUFFIX
from bench.plan.grid import CACHE_RESIDENT, DISPATCH_BOUND, MODEL_WIDTH, shape_label

ROUNDS = 6
SAMPLES_PER_ROUND = 40
# shape -> fused/call level, µs
SHAPES = {shape_label(DISPATCH_BOUND): 4.0, shape_label(MODEL_WIDTH): 40.0, shape_label(CACHE_RESIDENT): 160.0}
# (workload, baseline, variant) -> its level as a multiple of fused/call's
LAYOUT = "page_offset"  # what the store reads a schema-5 CPU row's layout as
ROWS = {
    ("op", "unfused", "call"): 4.5,
    ("op", "fused", "call"): 1.0,
    ("op", "fused", "out"): 0.95,
    ("op", "native", "call"): 4.0,
    ("op", "compiled", "call"): 2.1,
    ("op", "ort", "custom-iobinding"): 1.05,
    ("limit", "copy", "into_preallocated"): 0.8,
}


@dataclass(frozen=True)
class Machine:
    label: str
    machine_id: str
    cpu_model: str
    host: str = "vm"
    noise: float = 0.02  # sd of the log round effect
    scale: float = 1.0  # this machine's times against the levels above


@dataclass
class History:
    machines: tuple[Machine, ...]
    commits: int
    with_samples: bool = True
    slowdown: dict[tuple[str, ...], tuple[int, float]] = field(default_factory=dict)  # row key -> (from commit, x)
    text: dict[str, str] = field(default_factory=dict)  # text columns overridden in every row (hostile fixtures)
    seed: int = 0


def sha_of(index: int) -> str:
    return hashlib.sha1(f"commit {index}".encode()).hexdigest()


def write_history(history: History, out: Path) -> list[Path]:
    """Write every report of ``history`` under ``out/<machine label>/``; returns the CSV paths."""
    rng = np.random.default_rng(history.seed)
    paths = []
    for m_index, machine in enumerate(history.machines):
        for commit in range(history.commits):
            stamp = pd.Timestamp("2026-11-01") + pd.Timedelta(hours=commit, minutes=m_index)
            path = out / machine.label.replace(" ", "_") / f"{stamp:%Y%m%dT%H%M%SZ}-{machine.host[:16]}.csv"
            paths.append(write_report(path, machine, commit, stamp, history, rng))
    return paths


def write_report(
    path: Path, machine: Machine, commit: int, stamp: pd.Timestamp, history: History, rng: np.random.Generator
) -> Path:
    rows, samples = [], {}
    for shape, level in SHAPES.items():
        elements = int(np.prod([int(d) for d in shape.split("x")]))
        for (workload, baseline, variant), factor in ROWS.items():
            key = (workload, shape, "float32", baseline, variant, "cpu", LAYOUT)
            start, slowdown = history.slowdown.get(key, (history.commits, 1.0))
            centre = level * factor * machine.scale * (slowdown if commit >= start else 1.0)
            effects = rng.normal(0.0, machine.noise, ROUNDS)
            values = centre * np.exp(effects[:, None] + rng.normal(0.0, 0.05, (ROUNDS, SAMPLES_PER_ROUND)))
            samples[key] = values
            median = float(np.median(values))
            bytes_moved = 8.0 * elements
            rows.append(
                {
                    **dict(zip(KEY_COLUMNS, key, strict=True)),
                    "n": values.size,
                    "min_us": float(values.min()),
                    "median_us": median,
                    "p90_us": float(np.quantile(values, 0.9)),
                    "p99_us": float(np.quantile(values, 0.99)),
                    "mean_us": float(values.mean()),
                    "std_us": float(values.std()),
                    "iqr_us": float(np.subtract(*np.quantile(values, [0.75, 0.25]))),
                    "rounds": ROUNDS,
                    "setup_s": 0.0,
                    "bytes_moved": bytes_moved,
                    "gbps": bytes_moved / median / 1e3,
                    "copy_gbps": np.nan,
                    "copy_share": np.nan,
                    "speedup_vs_unfused": np.nan,
                    "vs_launch_floor": np.nan,
                    "other_cpu_share": 0.01,
                    "page_fault_share": 0.0,
                    "threads": 1,
                    "copy_limit": "into_preallocated",
                    "note": "",
                    "timestamp_utc": f"{stamp:%Y%m%dT%H%M%SZ}",
                    "host": machine.host,
                    "git_commit": sha_of(commit),
                    "torch": "2.13.0+cpu",
                    "onnxruntime": "1.31.1",
                    "onnx": "1.23.2",
                    "compiler": "c++ 12.2.0",
                    "cxx11_abi": "1",
                    "machine_id": machine.machine_id,
                    "cpu_model": machine.cpu_model,
                    "cpu_governor": "not exposed",
                    "cpu_epp": "not exposed",
                    "cpu_boost": "not exposed",
                    "cpu_freq_range_mhz": "not exposed",
                    "gpu_policy": "",
                    "cpu_allocator": "default",
                    "thp": "enabled=madvise defrag=madvise",
                    "timer": "perf_counter",
                }
            )
    frame = pd.DataFrame(rows)
    _add_ratios(frame)
    for column, value in history.text.items():
        frame[column] = value
    frame.insert(0, "schema_version", 5)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame[["schema_version", *(c for c in STORE_COLUMNS if c != "layout")]].to_csv(path, index=False)
    if history.with_samples:
        _write_samples(path.with_name(path.stem + SAMPLES_SUFFIX), samples)
    return path


def _add_ratios(frame: pd.DataFrame) -> None:
    """copy_share against the copy row of the same shape; speed-up against unfused/call, as the benchmark does."""
    for _, group in frame.groupby("shape"):
        copy = group[(group.baseline == "copy")]["gbps"].iloc[0]
        unfused = group[(group.baseline == "unfused")]["median_us"].iloc[0]
        frame.loc[group.index, "copy_gbps"] = copy
        frame.loc[group.index, "copy_share"] = group["gbps"] / copy
        ops = group.index[group.workload == "op"]
        frame.loc[ops, "speedup_vs_unfused"] = unfused / frame.loc[ops, "median_us"]


def _write_samples(path: Path, samples: dict[tuple[str, ...], np.ndarray]) -> None:
    keys = list(samples)
    values = [samples[k] for k in keys]
    with open(path, "wb") as handle:
        np.savez_compressed(
            handle,
            schema_version=np.array(5),
            keys=np.array([key[:-1] for key in keys], dtype=str),  # schema 5: no layout
            counts=np.array([v.size for v in values], dtype=np.int64),
            samples_us=np.concatenate([v.ravel() for v in values]),
            rounds=np.concatenate([np.repeat(np.arange(v.shape[0], dtype=np.int16), v.shape[1]) for v in values]),
        )
