"""Synthetic bench reports for the report and compare tests (real file format, made-up samples)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from bench.measure.hardware import HARDWARE_COLUMNS
from bench.measure.timing import summarize
from bench.report.schema import (
    COLUMNS,
    KEY_COLUMNS,
    SCHEMA_VERSION,
    ReportPaths,
    RowKey,
    RowSamples,
    to_frame,
    write_report,
)

_DEFAULTS = {"string": "synthetic", "int64": 1, "Int64": 1, "float64": math.nan}


def make_key(
    shape: str = "8x128x1024",
    baseline: str = "fused",
    variant: str = "call",
    workload: str = "op",
    device: str = "cpu",
    layout: str = "natural",
) -> RowKey:
    return RowKey(
        workload=workload,
        shape=shape,
        dtype="float32",
        baseline=baseline,
        variant=variant,
        device=device,
        layout=layout,
    )


def in_rounds(values: np.ndarray, rounds: int = 3) -> RowSamples:
    """Samples taken in ``rounds`` consecutive rounds of (nearly) equal size, as bench/run.py takes them."""
    values = np.asarray(values, dtype=np.float64)
    return RowSamples(values, (np.arange(len(values)) * rounds // max(1, len(values))).astype(np.int16))


def synthetic_report(
    path: Path,
    samples: dict[tuple[str, ...], np.ndarray | RowSamples],
    schema_version: int = SCHEMA_VERSION,
    environment: dict[str, object] | None = None,
    row_environment: dict[tuple[str, ...], dict[str, object]] | None = None,
) -> Path:
    """A report file with these samples (arrays are spread over 3 rounds); ``environment`` sets columns of every row,
    ``row_environment`` columns of the rows it names."""
    samples = {k: v if isinstance(v, RowSamples) else in_rounds(v) for k, v in samples.items()}
    rows = []
    for key, row_samples in samples.items():
        row = {name: _DEFAULTS[dtype] for name, dtype, _ in COLUMNS}
        row.update(RowKey(*key)._asdict())
        row.update(vars(summarize(row_samples.values)))
        row["rounds"] = len(np.unique(row_samples.rounds))
        row["schema_version"] = schema_version
        row.update(environment or {})
        row.update((row_environment or {}).get(key, {}))
        rows.append(row)
    return write_report(path, to_frame(rows), samples).csv


def lognormal(rng: np.random.Generator, median_us: float, n: int, sigma: float = 0.1) -> np.ndarray:
    """Timing-like samples: right-skewed around ``median_us``."""
    return median_us * rng.lognormal(0.0, sigma, n)


def as_earlier_schema(csv: Path, version: int) -> Path:
    """The report (CSV and samples) rewritten as schema ``version`` wrote it: without what later schemas added."""
    import pandas as pd

    frame = pd.read_csv(csv, dtype=str)
    added = [*(HARDWARE_COLUMNS if version < 6 else ()), *(["layout"] if version < 7 else ())]
    if version < 5:
        added += ["machine_id", "cpu_governor", "cpu_epp", "cpu_boost", "cpu_freq_range_mhz", "cpu_cur_mhz"]
        added += ["gpu_policy", "gpu_clocks"]
    frame = frame.drop(columns=added)
    frame["schema_version"] = version
    frame.to_csv(csv, index=False)
    path = ReportPaths.for_csv(csv).samples
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files}
    if version < 7:  # the sidecar's keys had no layout either
        arrays["keys"] = arrays["keys"][:, : KEY_COLUMNS.index("layout")]
    arrays["schema_version"] = np.array(version)
    with open(path, "wb") as handle:
        np.savez_compressed(handle, **arrays)
    return csv
