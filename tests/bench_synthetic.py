"""Synthetic bench reports for the report and compare tests (real file format, made-up samples)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from bench.report import COLUMNS, KEY_COLUMNS, SCHEMA_VERSION, to_frame, write_report
from bench.timing import summarize

_DEFAULTS = {"string": "synthetic", "int64": 1, "float64": math.nan}


def make_key(shape: str = "8x128x1024", baseline: str = "fused", variant: str = "call", workload: str = "op") -> tuple[str, ...]:
    return (workload, shape, "float32", baseline, variant)


def synthetic_report(path: Path, samples: dict[tuple[str, ...], np.ndarray], schema_version: int = SCHEMA_VERSION) -> Path:
    rows = []
    for key, values in samples.items():
        row = {name: _DEFAULTS[dtype] for name, dtype, _ in COLUMNS}
        row.update(dict(zip(KEY_COLUMNS, key)))
        row.update(vars(summarize(np.asarray(values, dtype=np.float64))))
        row["schema_version"] = schema_version
        rows.append(row)
    return write_report(path, to_frame(rows), samples).csv


def lognormal(rng: np.random.Generator, median_us: float, n: int, sigma: float = 0.1) -> np.ndarray:
    """Timing-like samples: right-skewed around ``median_us``."""
    return median_us * rng.lognormal(0.0, sigma, n)
