"""bench/targets.py: the declared target table judged on report rows."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from bench.report import read_report
from bench.targets import DISPATCH_BOUND, TARGETS, evaluate_targets
from env.paths import REPO_ROOT


@pytest.fixture
def rng(generator):
    return np.random.default_rng(int(generator.initial_seed()))


def _frame(rows: list[tuple[str, str, str, str, float, float]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["workload", "shape", "baseline", "variant", "median_us", "copy_share"]).assign(dtype="float32")


def test_every_target_name_states_its_bar():
    names = [t.name for t in TARGETS]
    assert len(set(names)) == len(names)
    for name in names:
        assert re.search(r": (>= [\d.]+x?|faster|within \d+%)", name), name


def test_speedups_judged_against_their_own_bar(rng):
    base = rng.uniform(20.0, 80.0)
    # 1x8x512 fused 5.5x faster (meets 5x); 8x128x1024 only 2.5x (misses 3x).
    rows = [
        ("op", DISPATCH_BOUND, "unfused", "call", base, np.nan), ("op", DISPATCH_BOUND, "fused", "call", base / 5.5, np.nan),
        ("op", "8x128x1024", "unfused", "call", 10 * base, np.nan), ("op", "8x128x1024", "fused", "call", 4 * base, np.nan),
        ("op", "8x128x1024", "fused", "out", 3 * base, 0.85), ("op", "32x512x4096", "fused", "out", 90 * base, 0.5),
    ]
    results = {r.name: r for r in evaluate_targets(_frame(rows))}
    dispatch, larger, compiled, copy, ort, model = (results[t.name] for t in TARGETS)
    assert dispatch.met is True and "5.5x" in dispatch.detail
    assert larger.met is False and "2.5x" in larger.detail
    assert compiled.met is None and ort.met is None and model.met is None  # their rows were not measured
    assert copy.met is False and "85%" in copy.detail and "50%" in copy.detail


def test_other_dtypes_do_not_count(rng):
    base = rng.uniform(20.0, 80.0)
    rows = _frame([("op", DISPATCH_BOUND, "unfused", "call", base, np.nan), ("op", DISPATCH_BOUND, "fused", "call", base / 6, np.nan)])
    assert evaluate_targets(rows.assign(dtype="float16"))[0].met is None
    assert evaluate_targets(rows)[0].met is True


def test_the_recorded_full_report_measures_every_target():
    frame = read_report(REPO_ROOT / "reports" / "baseline" / "cpu-all.csv")
    unmeasured = [r.name for r in evaluate_targets(frame) if r.met is None]
    assert not unmeasured
