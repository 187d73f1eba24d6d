"""bench/experiments (power curves) and bench/stats/design.py: their calibration reads the committed measurements,
their simulation judges with the product's rules, and the docs' table is the code's."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from bench.experiments import calibration, confirm_share, power_curves, power_measure
from bench.experiments.rows import is_op_row
from bench.report.schema import RowSamples
from bench.stats import compare, design
from env.paths import REPO_ROOT
from tests.helpers.bench_synthetic import make_key, synthetic_report


@pytest.fixture
def rng(generator):
    return np.random.default_rng(int(generator.initial_seed()))


def test_the_docs_carry_the_design_table_the_code_computes():
    # The docs once quoted "12 pairs trimmed to 8" (the code keeps 10) and the untrimmed t at 10 pairs.
    docs = "\n".join(line.strip() for line in (REPO_ROOT / "docs" / "comparisons.md").read_text().splitlines())
    assert design.table() in docs  # (indented there: it sits in a list item)
    assert [design.kept_pairs(n) for n in (4, 10, 12, 20)] == [4, 8, 10, 16]


def test_the_pair_spreads_come_from_the_recorded_a_a_intervals():
    spreads = calibration.pair_spreads([power_curves.SAME_CPU_RESULTS])
    assert len(spreads) == 25  # 5 A/A runs, 5 op rows each
    # Recomputed by hand for A/A run 1's allocating call at 1x8x512: 1.010 [0.963, 1.058].
    q = __import__("scipy.stats").stats.t.ppf(1 - 0.04 / 64, 7)
    first = (math.log(1.058) - math.log(0.963)) / (2 * q) * math.sqrt(56 / 9)
    assert spreads[0] == pytest.approx(first) and 0.005 < np.median(spreads) < 0.1


def test_a_full_reports_noise_is_fitted_over_its_counted_rows():
    noise = calibration.report_noise(power_curves.FULL_REPORT)
    assert noise.units == 3 and noise.rows == len(noise.variances) > 50 and noise.prior.dof > 0


def test_the_simulated_quick_ab_holds_its_false_alarms_and_gains_power_with_the_slowdown(rng):
    spreads = calibration.pair_spreads([power_curves.SAME_CPU_RESULTS])
    quick = power_curves.AbDesign("quick A/B", 10, 32, 4)
    none = power_curves.simulate_ab(quick, spreads, 0.0, 60, rng)
    assert none["p_regression_op_row"] <= 0.02 and none["p_false_alarm_run"] <= 0.1
    large = power_curves.simulate_ab(quick, spreads, 0.20, 30, rng)
    assert large["p_regression_op_row"] >= 0.95


def test_the_simulated_separate_reports_keep_their_coverage(rng):
    noise = calibration.report_noise(power_curves.FULL_REPORT)
    kinds, op_rows = power_curves._counted_kinds(power_curves.FULL_REPORT)
    found = power_curves.simulate_separate(noise, kinds, op_rows, 0.0, 40, rng)
    assert found["coverage_95_per_row"] == pytest.approx(0.95, abs=0.02)
    assert found["p_false_alarm_run"] <= 0.15 and found["p_regression_op_row"] <= 0.02


def test_the_curves_name_each_measured_folder_by_its_rule(tmp_path):
    point = {"slowdown_pct": 5, "source": "measured", "runs": 10, "p_regression_op_row": 0.7}
    pd.DataFrame([{"comparison": "quick A/B", **point}]).to_csv(tmp_path / "measured.csv", index=False)
    (tmp_path / "suspect_bound").mkdir()
    pd.DataFrame([{"comparison": "quick A/B", **point, "p_regression_op_row": 0.9}]).to_csv(
        tmp_path / "suspect_bound" / "measured.csv", index=False
    )
    (tmp_path / "separate_quick").mkdir()
    pd.DataFrame([{"slowdown_pct": 10, "pairs": 45, "p_regression_op_row": 0.4, "p_false_alarm_pair": 0.02}]).to_csv(
        tmp_path / "separate_quick" / "shifted_power_summary.csv", index=False
    )
    found = power_curves.measured_points(tmp_path).set_index("comparison")
    assert found.loc[power_curves.EARLIER_BOUND].p_regression_op_row == 0.7
    assert found.loc["quick A/B"].p_regression_op_row == 0.9  # the product's current rule keeps the plain name
    shifted = found.loc[power_curves.SHIFTED_FOLDERS["separate_quick"]]
    assert shifted.source == "measured noise" and shifted.runs == 45 and shifted.p_false_alarm_run == 0.02


def test_measured_runs_are_summarised_per_point_with_the_delivered_slowdown():
    runs = pd.DataFrame(
        [
            {
                "comparison": "quick A/B",
                "slowdown_pct": 10,
                "op_rows": 4,
                "op_rows_flagged": 4,
                "other_rows_flagged": 0,
                "op_rows_intervals": "call 1x8x512 1.102 [1.05, 1.15] REGRESSION; "
                "out 1x8x512 1.098 [1.04, 1.16] REGRESSION",
            },
            {
                "comparison": "quick A/B",
                "slowdown_pct": 10,
                "op_rows": 4,
                "op_rows_flagged": 2,
                "other_rows_flagged": 1,
                "op_rows_intervals": "call 8x128x1024 1.094 [0.99, 1.2] INCONCLUSIVE",
            },
        ]
    )
    (line,) = power_measure.summarise(runs).to_dict("records")
    assert line["p_regression_op_row"] == 0.75 and line["p_every_op_row"] == 0.5 and line["p_false_alarm_run"] == 0.5
    assert line["delivered_median"] == pytest.approx(1.098) and line["delivered_range"] == "1.094-1.102"


def test_the_delivered_slowdown_of_each_op_row_is_pooled_over_the_runs():
    texts = [
        "call 1x8x512 natural 1.040 [1.00, 1.08] REGRESSION; out 8x128x1024 natural 1.10 [1.0, 1.2] INCONCLUSIVE",
        "call 1x8x512 natural 1.060 [1.02, 1.10] REGRESSION; out 8x128x1024 natural 1.00 [0.9, 1.1] SAME",
        "call 1x8x512 natural 1.050 [1.01, 1.09] REGRESSION",
    ]
    runs = pd.DataFrame({"comparison": "quick A/B", "slowdown_pct": 5, "op_rows_intervals": texts})
    rows = power_measure.delivered_per_row(runs).set_index("row")
    call = rows.loc["call 1x8x512 natural"]
    logs = np.log([1.04, 1.06, 1.05])
    assert call.runs == 3 and call.delivered == pytest.approx(math.exp(logs.mean()))
    half = 4.302653 * logs.std(ddof=1) / math.sqrt(3)  # t(0.975, 2 dof)
    assert call.ci_low == pytest.approx(math.exp(logs.mean() - half), rel=1e-5)
    assert call.within_1_point and not call.interval_within_1_point  # 1.05 on the mark, +-2.5 % around it
    out = rows.loc["out 8x128x1024 natural"]
    assert out.runs == 2 and out.delivered == pytest.approx(math.sqrt(1.1)) and out.within_1_point


def _separate_reports(folder, rng, count: int, slower: dict | None = None) -> list:
    """``count`` synthetic reports of six rows (the fused op's two among them), each as a run folder's pooled
    report; ``slower``: {report index: {row: factor}}."""
    from tests.helpers.bench_synthetic import lognormal, make_key, synthetic_report

    keys = [make_key(shape=s, baseline=b) for s in ("1x8x512", "8x128x1024") for b in ("unfused", "fused", "native")]
    reports = []
    for i in range(count):
        (folder / f"r{i}" / "run").mkdir(parents=True)
        factors = (slower or {}).get(i, {})
        rows = {k: lognormal(rng, 10.0 * (j + 1), 900) * factors.get(k, 1.0) for j, k in enumerate(keys)}
        reports.append(synthetic_report(folder / f"r{i}" / "run" / "pooled.csv", rows))
    return reports


def test_a_a_pairs_of_separate_reports_count_false_alarms_and_coverage(tmp_path, rng):
    from bench.experiments import aa_reports

    reports = _separate_reports(tmp_path, rng, 4)
    pairs = aa_reports.judge_all(reports).pairs
    assert len(pairs) == 6 and set(pairs.rows) == {6}
    # 36 row-pairs at 95 %, but not independent (each report is in three pairs): over 200 seeds the count
    # was 29-36 (mean 34.2), and one seed gave 27, so the bound sits below that; the rate itself is tested
    # over many independent draws (test_the_simulated_separate_reports_keep_their_coverage).
    assert pairs.false_regressions.sum() == 0 and pairs.covered_95.sum() >= 0.7 * 36


def test_shifted_pairs_slow_only_the_fused_op_rows_and_judge_them_as_compare_does(tmp_path, rng):
    from bench.experiments import aa_reports

    reports = _separate_reports(tmp_path, rng, 3)
    shifted = aa_reports.judge_all(reports).shifted
    assert len(shifted) == 3 * len(aa_reports.SHIFTS) and set(shifted.op_rows) == {2}
    assert set(shifted.counted_rows) == {6}
    by_shift = shifted.groupby("slowdown_pct")[["op_rows_flagged", "other_rows_flagged"]].sum()
    # Round medians of 300 samples at 10 % spread move about 0.7 %: 20 % is past any interval, 0 % inside all.
    assert by_shift.loc[20].op_rows_flagged == 6 and by_shift.loc[0].op_rows_flagged == 0
    assert by_shift.other_rows_flagged.sum() == 0  # the unshifted rows stay as they were
    # At 0 % the shifted judging is compare_reports' own verdict on the pair.
    first = shifted[(shifted.slowdown_pct == 0)].iloc[0]
    direct = compare.compare_reports(reports[0], reports[1])
    direct_op = [r for r in direct.rows if is_op_row(r.key)]
    assert first.op_rows_flagged == sum(r.verdict == compare.REGRESSION for r in direct_op)
    summary = aa_reports.power_summary(shifted).set_index("slowdown_pct")
    assert summary.loc[20].p_regression_op_row == 1.0 and summary.loc[0].p_regression_op_row == 0.0
    assert summary.loc[20].pairs == 3


def test_a_a_flagged_rows_carry_both_sides_units(tmp_path, rng):
    from bench.experiments import aa_reports

    shifted = make_key(shape="8x128x1024", baseline="fused")
    reports = _separate_reports(tmp_path, rng, 3, slower={2: {shifted: 1.3}})
    flagged = aa_reports.judge_all(reports).flagged
    # The row made 30 % slower in r2 is flagged in both pairs with r2 and nowhere else.
    assert sorted(zip(flagged.base, flagged.new, strict=True)) == [("r0", "r2"), ("r1", "r2")]
    assert set(flagged.baseline) == {shifted.baseline} and set(flagged["shape"]) == {shifted.shape}
    assert (flagged.verdict == compare.REGRESSION).all() and flagged.ratio.between(1.25, 1.35).all()
    assert all(len(text.split()) == 3 for text in flagged.new_units_us)  # the three rounds of r2


def test_a_process_without_its_second_core_reads_a_speedup_near_one():
    from bench.experiments import thread_state

    lines = pd.DataFrame(
        [
            {"process": p, "second": s, "threads": t, "median_us": us}
            for p, (two, one) in enumerate([(5800.0, 12400.0), (12500.0, 12450.0)])
            for t, base in ((2, two), (1, one))
            for s, us in enumerate([base * 0.99, base, base * 1.02])
        ]
    )
    found = thread_state.summarise(lines, {0: 0.01, 1: 0.5}).set_index("process")
    assert found.loc[0].two_threads_us == 5800.0 and found.loc[0].speedup == pytest.approx(12400 / 5800)
    assert found.loc[1].speedup == pytest.approx(12450 / 12500) and found.loc[1].steal_s_per_vcpu == 0.5


def test_judge_only_finds_a_previous_runs_reports_in_the_order_they_were_made(tmp_path):
    from bench.experiments import aa_reports

    for index in (0, 2, 10, 1):
        (tmp_path / f"r{index}" / "run").mkdir(parents=True)
        (tmp_path / f"r{index}" / "run" / "pooled.csv").write_text("")
    found = aa_reports.measured_reports(tmp_path)
    assert [p.parents[1].name for p in found] == ["r0", "r1", "r2", "r10"]


def test_slowed_trees_are_the_clean_commit_built_with_the_switch(tmp_path, monkeypatch):
    # The slowdown reaches a build through the build-time switch, never through an edited source file.
    from bench.experiments import ab_measure

    checkouts, builds = [], []
    monkeypatch.setattr(ab_measure.scratch, "checkout", lambda sha, dest, repo: checkouts.append((sha, dest)) or dest)
    monkeypatch.setattr(
        ab_measure, "_build", lambda tree, console, percent=0, table=None: builds.append((tree.root, percent, table))
    )
    workspace = ab_measure.Workspace(tmp_path)
    table = tmp_path / "table-5.csv"
    trees = power_measure.slowed_trees(workspace, "c1ea4", [0, 5, 10], console=None, tables={5: table})
    assert trees == {5: "slow5", 10: "slow10"}
    assert {sha for sha, _ in checkouts} == {"c1ea4"}  # every tree is the clean commit itself
    built = {root: (percent, used) for root, percent, used in builds}
    # Only the tree of the slowdown the table was calibrated for is built with it.
    assert built[workspace.tree("slow5").root] == (5, table) and built[workspace.tree("slow10").root] == (10, None)
    assert built[workspace.tree("clean").root] == (0, None) and len(builds) == 4  # clean, REF, the two slowed


def test_a_table_option_names_its_percent_and_an_existing_file(tmp_path):
    (tmp_path / "t.csv").write_text("shape,dtype,variant,percent\n")
    assert power_measure.parse_tables([f"5={tmp_path / 't.csv'}"]) == {5: tmp_path / "t.csv"}
    for bad in (f"five={tmp_path / 't.csv'}", "5=", f"5={tmp_path / 'missing.csv'}"):
        with pytest.raises(ValueError, match="--table wants P=CSV"):
            power_measure.parse_tables([bad])


def _paired_stage(folder, ratios: dict) -> None:
    """A recorded stage of an A/B run: per row, BASE at 100 us in every round and NEW at that round's ratio."""

    def rounds(values) -> RowSamples:
        values = np.repeat(np.asarray(values, dtype=np.float64), 5)  # five samples a round: its median is its value
        return RowSamples(values, np.repeat(np.arange(len(values) // 5), 5).astype(np.int16))

    base = {key: rounds(np.full(len(r), 100.0)) for key, r in ratios.items()}
    new = {key: rounds(100.0 * np.asarray(r)) for key, r in ratios.items()}
    synthetic_report(folder / "base" / "pooled.csv", base)
    synthetic_report(folder / "new" / "pooled.csv", new)


def test_rejudging_at_another_share_counts_a_suspect_never_measured_again_as_missed(tmp_path):
    wide = 1.06 * np.exp(np.array([-0.12, 0.12, -0.09, 0.09, -0.06, 0.06, -0.03, 0.03, -0.01, 0.01]))
    measured_again, not_measured = make_key(variant="call"), make_key(variant="out")
    unchanged = make_key(baseline="unfused")
    _paired_stage(tmp_path, {measured_again: wide, not_measured: wide, unchanged: np.ones(10)})
    # The recorded confirmation timed one of the two suspects: 20 pairs, 10 % slower within 0.5 %.
    tight = 1.10 * np.exp(np.tile([-0.005, 0.005], 10))
    _paired_stage(tmp_path / "confirm", {measured_again: tight})
    judged = confirm_share.judge_at_share(tmp_path, share=0.2, threshold=0.03, alpha=0.05)
    assert judged.op_rows == 2 and judged.op_flagged == 1 and judged.confirmed_op_rows == 1
    assert judged.unmeasured_suspects == 1 and judged.other_flagged == 0
    # The first stage alone, at the whole alpha, leaves both suspects undecided: the confirmation flagged one.
    first = compare.compare_reports(tmp_path / "base/pooled.csv", tmp_path / "new/pooled.csv", 0.03, 0.05, paired=True)
    assert sorted(compare.suspects(first, 0.03)) == sorted([measured_again, not_measured])
