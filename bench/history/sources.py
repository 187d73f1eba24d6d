"""The one place the history imports the rest of bench/ from: what a row is called, and how two rows are judged.

Everything else in bench/history reads files itself, because bench/report/schema.py
reads only its current schema version while the history keeps every version
(migrate.py). Moving or rewriting those modules means repointing the imports
below, nothing else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bench.measure.hardware import HARDWARE_COLUMNS
from bench.report.schema import KEY_COLUMNS, SAMPLES_SUFFIX, RowSamples, earlier_layout, sample_key
from bench.report.targets import evaluate_targets, op_layouts
from bench.stats.compare import (
    IMPROVEMENT,
    INCONCLUSIVE,
    LIMIT_WORKLOAD,
    MIN_UNITS,
    REGRESSION,
    SAME,
    compare_samples,
    family_alpha_per_row,
)

__all__ = [
    "HARDWARE_COLUMNS",
    "IMPROVEMENT",
    "INCONCLUSIVE",
    "INSUFFICIENT",
    "KEY_COLUMNS",
    "LIMIT_WORKLOAD",
    "MIN_UNITS",
    "REGRESSION",
    "SAME",
    "SAMPLES_SUFFIX",
    "RowJudgement",
    "earlier_layout",
    "judge_units",
    "op_layouts",
    "row_alpha",
    "sample_key",
    "targets_of",
]

# Where one side has no samples, or too few units for an interval: no verdict is invented from two medians.
INSUFFICIENT = "insufficient data"


@dataclass(frozen=True)
class RowJudgement:
    ratio: float  # new / previous, from the units
    ci_low: float
    ci_high: float
    units: int
    verdict: str


def judge_units(
    previous: np.ndarray, new: np.ndarray, threshold: float, alpha: float, seed: int = 0, paired: bool = False
) -> RowJudgement:
    """The project's interval statistics on two rows' units (one median per round). Two reports of a history are
    judged unpaired; the two sides of one A/B run are ``paired`` (unit k of each ran side by side)."""
    if min(len(previous), len(new)) < MIN_UNITS:
        return RowJudgement(math.nan, math.nan, math.nan, min(len(previous), len(new)), INSUFFICIENT)
    # Each unit enters as a one-sample round: the comparison takes each round's median, which is the unit itself.
    base = RowSamples(np.asarray(previous, dtype=np.float64), np.arange(len(previous), dtype=np.int16))
    later = RowSamples(np.asarray(new, dtype=np.float64), np.arange(len(new), dtype=np.int16))
    result = compare_samples((), base, later, threshold, alpha, np.random.default_rng(seed), paired=paired)
    return RowJudgement(result.ratio, result.ci_low, result.ci_high, result.units, result.verdict)


def row_alpha(alpha: float, counted_rows: int) -> float:
    """Each row's alpha when ``alpha`` is family-wise over a report's counted rows."""
    return family_alpha_per_row(alpha, counted_rows)


def targets_of(rows) -> list[tuple[str, bool | None, str]]:
    """The declared targets judged on one report's rows: (name, met or None when not measured, detail)."""
    return [(r.name, r.met, r.detail) for r in evaluate_targets(rows)]
