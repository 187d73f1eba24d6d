"""The two experiments behind the sampling floors: which rows a floor ended, and when a call settles."""

from __future__ import annotations

import numpy as np

from bench.experiments.sample_floor import first_per_round, rows_at_floor
from bench.experiments.warmup_curve import settled_from
from bench.report.schema import RowSamples


def test_only_rows_whose_every_round_stopped_at_the_floor_are_kept(generator):
    values = np.random.default_rng(int(generator.initial_seed())).lognormal(size=30)
    at_floor = RowSamples(values[:21], np.repeat(np.arange(3, dtype=np.int16), 7))
    budget_ended = RowSamples(values[:23], np.array([0] * 7 + [1] * 9 + [2] * 7, dtype=np.int16))
    one_round = RowSamples.single_round(values[:7])
    kept = rows_at_floor({"a": at_floor, "b": budget_ended, "c": one_round}, 7)
    assert list(kept) == ["a"]
    firsts = first_per_round(at_floor.values, at_floor.rounds, 4)
    assert np.array_equal(firsts, np.concatenate([values[0:4], values[7:11], values[14:18]]))


def test_a_call_settles_from_the_first_call_after_which_every_call_is_within_the_tolerance():
    assert settled_from([1.3, 1.2, 1.01, 0.98, 1.0]) == 3
    assert settled_from([1.0, 1.0, 1.2, 1.0]) == 4  # a late outlier moves it
    assert settled_from([1.0, 0.99]) == 1
    assert settled_from([1.0, 1.5]) == 3  # never settled: one past the last call
