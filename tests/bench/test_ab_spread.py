"""bench/experiments/ab_spread.py: the spread of two processes' medians, from their reports, and its option checks."""

from __future__ import annotations

import numpy as np
import pytest

from bench.experiments.ab_spread import main, spread, summary
from bench.report.schema import RowSamples
from tests.helpers.bench_synthetic import make_key, synthetic_report

ROUNDS = 6


def _rounds(medians: np.ndarray, rng: np.random.Generator) -> RowSamples:
    values = np.concatenate([m * rng.lognormal(0, 0.01, 301) for m in medians])
    return RowSamples(values, np.repeat(np.arange(len(medians)), 301).astype(np.int16))


def test_pair_spread_and_round_to_round_drift_are_told_apart(tmp_path, generator):
    rng = np.random.default_rng(int(generator.initial_seed()) % 2**32)
    drift = np.exp(rng.normal(0, 0.3, ROUNDS))  # the host's speed, round by round, shared by both workers
    apart = np.exp(rng.normal(0, 0.2, ROUNDS))  # what the two workers do not share
    shared, split = make_key(shape="1x8x512"), make_key(baseline="unfused")
    limit = make_key(workload="limit", baseline="copy")
    a = {shared: _rounds(10 * drift, rng), split: _rounds(20 * drift * apart, rng), limit: _rounds(drift, rng)}
    b = {shared: _rounds(10 * drift, rng), split: _rounds(20 * drift, rng), limit: _rounds(drift, rng)}
    csvs = {"A": synthetic_report(tmp_path / "a.csv", a), "B": synthetic_report(tmp_path / "b.csv", b)}
    frame = spread(csvs, "turns-stopped").set_index("row")
    assert len(frame) == 2  # limit rows measure the machine, not the build
    shared_row, split_row = frame.loc[" ".join(shared[:5])], frame.loc[" ".join(split[:5])]
    # Independent references: the drift and the split drawn above (the samples' own noise adds about 0.001).
    assert shared_row.pair_log_ratio_sd < 0.01
    assert split_row.pair_log_ratio_sd == pytest.approx(np.std(np.log(apart), ddof=1), abs=0.01)
    assert shared_row.round_to_round_sd == pytest.approx(np.std(np.log(drift), ddof=1), abs=0.01)
    table = summary(frame.reset_index())
    assert table.splitlines()[2].startswith("| turns-stopped | 2 | ")
    assert "1x8x512 call" in table and "8x128x1024 call" not in table  # the fused op's rows only


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--modes", "turns,sequential"], "--modes must be a comma list of sequential, turns-running, turns-stopped"),
        (["--rounds", "1"], "--rounds must be an integer >= 2"),
    ],
)
def test_bad_options_are_refused_before_any_worker_starts(argv, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        main([*argv, "--out", str(tmp_path)])
    assert not any(tmp_path.iterdir())
