"""The core-placement probe, its place in the samples, and separate reports compared within one placement."""

from __future__ import annotations

import math
import os
import subprocess

import numpy as np
import pandas as pd
import pytest
import torch
from rich.console import Console

from bench.experiments import core_placement
from bench.measure import core_sync
from bench.report.schema import RowSamples, read_samples
from bench.stats.compare import INCONCLUSIVE, REGRESSION, compare_reports, print_comparison, unpaired_log_fit
from bench.stats.placement import FAR_BOUND, NOT_PROBED, Placements, placements_of
from bench.stats.pooled import pool_reports
from tests.helpers.bench_synthetic import lognormal, make_key, synthetic_report

NEAR_US, FAR_US = 5.9, 7.9  # the probe's two readings on the development VM


@pytest.fixture
def rng(generator):
    return np.random.default_rng(int(generator.initial_seed()))


def _probed_rounds(rng, medians: list[float], readings: list[float], n: int = 300) -> RowSamples:
    """Round r's samples centred on medians[r], each carrying round r's probe reading."""
    values = np.concatenate([lognormal(rng, m, n, 0.03) for m in medians])
    rounds = np.repeat(np.arange(len(medians)), n).astype(np.int16)
    return RowSamples(values, rounds, np.repeat(np.asarray(readings, dtype=float), n))


def test_the_probe_reads_only_where_threads_meet():
    assert math.isnan(core_sync.sync_probe_us(1))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        reading = core_sync.sync_probe_us()
    finally:
        torch.set_num_threads(before)
    # A 64K-element add takes microseconds on any CPU this runs on; not a timing claim, a units check.
    assert 0.1 < reading < 10_000
    assert core_sync.bracket(NEAR_US, FAR_US) == FAR_US and math.isnan(core_sync.bracket(math.nan, NEAR_US))


def test_units_on_one_placement_need_no_covariate():
    for readings in ([NEAR_US] * 3, [FAR_US] * 3):
        sync = dict(enumerate(readings))
        placements = placements_of(range(3), range(3), sync, sync)
        assert not placements.mixed and not placements.confounded and placements.note == ""
    # Unprobed units (one thread, a GPU, an earlier report), or one unit without a reading: not probed.
    assert placements_of(range(3), range(3), {}, {}) is NOT_PROBED
    assert placements_of(range(3), range(3), dict.fromkeys(range(3), NEAR_US), {0: NEAR_US, 1: NEAR_US}) is NOT_PROBED
    nan = dict.fromkeys(range(3), math.nan)
    assert placements_of(range(3), range(3), nan, nan) is NOT_PROBED


def test_each_unit_is_placed_against_the_lowest_reading():
    placements = placements_of([0, 1, 2], [0, 1, 2], {0: NEAR_US, 1: 6.0, 2: FAR_US}, {0: 8.1, 1: 5.8, 2: 6.1})
    assert placements.base_far.tolist() == [False, False, True] and placements.new_far.tolist() == [True, False, False]
    assert placements.mixed and not placements.confounded and placements.note == Placements.MIXED
    # The bound sits between the two readings: just under it is the near placement.
    just_under = 5.8 * FAR_BOUND * 0.99
    assert not placements_of([0], [0], {0: 5.8}, {0: just_under}).mixed


def test_placement_and_side_coinciding_cannot_be_judged():
    placements = placements_of(range(3), range(3), dict.fromkeys(range(3), NEAR_US), dict.fromkeys(range(3), FAR_US))
    assert placements.confounded and placements.note == Placements.DIFFERS


def test_the_covariate_fit_compares_the_sides_at_equal_placement():
    # log values: BASE near 0, 0, far 0.3; NEW near 0.1, far 0.4, 0.4: a side effect of exactly 0.1 and a
    # placement effect of 0.3, with no residual.
    base, new = np.array([0.0, 0.0, 0.3]), np.array([0.1, 0.4, 0.4])
    fit = unpaired_log_fit(base, new, Placements(np.array([False, False, True]), np.array([False, True, True])))
    assert fit.estimate == pytest.approx(0.1) and fit.variance == pytest.approx(0.0, abs=1e-20) and fit.dof == 3
    # Without the placements the side effect absorbs the placement mix (0.3 / 3 more on NEW's side).
    plain = unpaired_log_fit(base, new)
    assert plain.estimate == pytest.approx(0.2) and plain.dof == 4 and plain.variance > 0.01


def test_separate_reports_on_different_placements_are_not_a_regression(tmp_path, rng):
    # What the A/A pairs of separate quick reports showed: BASE's three processes on the near placement,
    # NEW's on the far one, each side's units agreeing within 1 %, NEW 1.35x slower on identical code.
    two_threads, one_thread = make_key(workload="model", shape="1x32"), make_key()
    base = synthetic_report(
        tmp_path / "base.csv",
        {
            two_threads: _probed_rounds(rng, [575.0, 577.0, 572.0], [NEAR_US, 5.8, 6.0]),
            one_thread: _probed_rounds(rng, [100.0, 100.5, 99.5], [math.nan] * 3),
        },
    )
    new = synthetic_report(
        tmp_path / "new.csv",
        {
            two_threads: _probed_rounds(rng, [775.0, 779.0, 771.0], [FAR_US, 8.0, 7.8]),
            one_thread: _probed_rounds(rng, [130.0, 130.5, 129.5], [math.nan] * 3),
        },
    )
    rows = {r.key: r for r in compare_reports(base, new).rows}
    assert rows[two_threads].verdict == INCONCLUSIVE and rows[two_threads].placement == Placements.DIFFERS
    assert 1.3 < rows[two_threads].ratio < 1.4 and math.isnan(rows[two_threads].ci_low)
    # A row without probes is judged as before: a 30 % slowdown in every unit is a regression.
    assert rows[one_thread].verdict == REGRESSION and rows[one_thread].placement == ""
    # Without the readings the placement row would have been flagged: this is the false alarm it prevents.
    unprobed = {k: RowSamples(v.values, v.rounds) for k, v in read_samples(new).items()}
    bare = synthetic_report(tmp_path / "bare.csv", unprobed)
    bare_base = synthetic_report(
        tmp_path / "bare_base.csv", {k: RowSamples(v.values, v.rounds) for k, v in read_samples(base).items()}
    )
    assert {r.key: r.verdict for r in compare_reports(bare_base, bare).rows}[two_threads] == REGRESSION
    console = Console(record=True, width=250)
    assert print_comparison(compare_reports(base, new), 0.03, 0.05, console) == 1  # the one-thread row
    text = console.export_text()
    assert "1 row(s) INCONCLUSIVE because their threads ran on one core placement in every BASE process" in text
    assert "fused/call 1x32" in text


def test_a_mixed_placement_withholds_a_verdict_the_placements_explain(tmp_path, rng):
    # NEW's units: five far (1.35x) and one near at BASE's level. The plain comparison reads a 1.28x
    # slowdown; at equal placement NEW's near unit matches BASE's: no verdict.
    key = make_key(workload="model", shape="1x32")
    base = synthetic_report(tmp_path / "base.csv", {key: _probed_rounds(rng, [575.0] * 6, [NEAR_US] * 6)})
    new = synthetic_report(
        tmp_path / "new.csv",
        {key: _probed_rounds(rng, [776.0, 778.0, 774.0, 777.0, 775.0, 576.0], [FAR_US] * 5 + [5.8])},
    )
    (row,) = compare_reports(base, new).rows
    assert row.verdict == INCONCLUSIVE and row.placement == Placements.MIXED and 1.25 < row.ratio < 1.32
    bare_base = {k: RowSamples(v.values, v.rounds) for k, v in read_samples(base).items()}
    bare_new = {k: RowSamples(v.values, v.rounds) for k, v in read_samples(new).items()}
    (row,) = compare_reports(
        synthetic_report(tmp_path / "bare_base.csv", bare_base), synthetic_report(tmp_path / "bare_new.csv", bare_new)
    ).rows
    assert row.verdict == REGRESSION  # without the readings: a false alarm


def test_a_slowdown_both_comparisons_see_keeps_its_verdict(tmp_path, rng):
    key = make_key(workload="model", shape="1x32")
    base = synthetic_report(
        tmp_path / "base.csv",
        {key: _probed_rounds(rng, [575.0, 576.0, 574.0, 577.0, 776.0, 573.0], [NEAR_US] * 4 + [FAR_US, 5.8])},
    )
    new = synthetic_report(
        tmp_path / "new.csv",
        {key: _probed_rounds(rng, [862.0, 865.0, 1164.0, 861.0, 864.0, 863.0], [5.8, 5.9, 8.1, 6.0, 5.9, 5.8])},
    )
    (row,) = compare_reports(base, new).rows
    assert row.verdict == REGRESSION and 1.4 < row.ratio < 1.6 and row.placement == Placements.MIXED


def test_probe_readings_survive_the_file_and_the_pooling(tmp_path, rng):
    key, other = make_key(workload="model", shape="1x32"), make_key()
    csvs = []
    for process, reading in enumerate((NEAR_US, FAR_US, 6.1)):
        probed = _probed_rounds(rng, [575.0], [reading], n=50)
        plain = RowSamples(lognormal(rng, 100.0, 50), np.zeros(50, dtype=np.int16))
        csvs.append(synthetic_report(tmp_path / f"p{process}.csv", {key: probed, other: plain}))
    assert read_samples(csvs[1])[key].round_sync_us() == {0: FAR_US}
    assert read_samples(csvs[1])[other].sync_us is None
    pooled = read_samples(pool_reports(csvs, tmp_path / "pooled.csv"))
    assert pooled[key].round_sync_us() == {0: NEAR_US, 1: FAR_US, 2: 6.1}
    assert pooled[other].sync_us is None and pooled[other].round_sync_us() == {}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the round trip needs CPUs 0 and 1")
def test_the_round_trip_tool_builds_and_reads_one_number_a_window(tmp_path):
    tool = core_placement.build_tool(tmp_path)
    done = subprocess.run([str(tool), "3", "2000"], capture_output=True, text=True, check=True)
    windows = [float(v) for v in done.stdout.split()]
    assert len(windows) == 3 and all(w > 0 for w in windows)  # nanoseconds a round trip; no size asserted


def test_placements_are_summarised_by_the_round_trip_and_judged_by_the_probe_rule():
    rounds = pd.DataFrame(
        {
            "round": range(5),
            "round_trip_ns": [55.0, 60.0, 330.0, 340.0, 58.0],
            "probe_us": [5.8, 5.9, 7.9, 8.0, 7.5],  # the last: a near round the probe calls far
            "model_us": [570.0, 575.0, 770.0, 780.0, 600.0],
        }
    )
    summary = core_placement.by_placement(rounds).set_index("placement")
    assert summary.loc["far", "rounds"] == 2 and summary.loc["far", "probe_called_far"] == 1.0
    assert summary.loc["near", "rounds"] == 3 and summary.loc["near", "probe_called_far"] == pytest.approx(1 / 3)
    assert summary.loc["near", "model_us_median"] == 575.0
