"""bench/compare.py on synthetic reports: the verdicts, the listing, the exit codes, the errors."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from invoke import Context, Exit
from rich.console import Console

import tasks
from bench.compare import IMPROVEMENT, NOT_SIGNIFICANT, REGRESSION, SAME, TRANSIENT, bootstrap_ratio_interval, compare_reports, main
from bench.report import SCHEMA_VERSION
from env.paths import REPO_ROOT
from tests.helpers.bench_synthetic import lognormal, make_key, synthetic_report


@pytest.fixture
def rng(generator):
    return np.random.default_rng(int(generator.initial_seed()))


def _run(base, new, **kwargs) -> tuple[int, str]:
    console = Console(record=True, width=200)
    code = main(str(base), str(new), console=console, **kwargs)
    return code, console.export_text()


def test_no_change_is_not_a_regression(tmp_path, rng):
    keys = [make_key(shape=s, baseline=b) for s in ("1x8x512", "8x128x1024") for b in ("unfused", "fused")]
    base = synthetic_report(tmp_path / "a.csv", {k: lognormal(rng, 10.0 * (i + 1), 2000) for i, k in enumerate(keys)})
    new = synthetic_report(tmp_path / "b.csv", {k: lognormal(rng, 10.0 * (i + 1), 2000) for i, k in enumerate(keys)})
    code, text = _run(base, new)
    assert code == 0, text
    comparison = compare_reports(base, new)
    assert [r.verdict for r in comparison.rows] == [SAME] * 4
    for r in comparison.rows:
        # Same distribution: ratio near 1 with a tight interval around it (a 95 % interval
        # misses 1 one time in 20, so its containing 1 is not asserted row by row).
        assert 0.97 < r.ratio < 1.03 and r.ci_low <= r.ratio <= r.ci_high and r.ci_high - r.ci_low < 0.06
    assert "0 regression(s) - OK" in text


def test_report_compared_with_itself_is_clean(tmp_path, rng):
    csv = synthetic_report(tmp_path / "a.csv", {make_key(): lognormal(rng, 3.0, 500, sigma=0.5)})
    code, text = _run(csv, csv)
    assert code == 0 and "1.000" in text


def test_30_percent_slowdown_with_many_samples_is_a_regression(tmp_path, rng):
    slow, same = make_key(baseline="fused"), make_key(baseline="unfused")
    base = synthetic_report(tmp_path / "a.csv", {slow: lognormal(rng, 10.0, 1000), same: lognormal(rng, 50.0, 1000)})
    new = synthetic_report(tmp_path / "b.csv", {slow: lognormal(rng, 13.0, 1000), same: lognormal(rng, 50.0, 1000)})
    comparison = compare_reports(base, new)
    verdicts = {r.key: r for r in comparison.rows}
    assert verdicts[slow].verdict == REGRESSION and verdicts[same].verdict == SAME
    row = verdicts[slow]
    assert 1.2 < row.ci_low < row.ratio < row.ci_high < 1.4 and 1.25 < row.ratio < 1.35
    assert verdicts[slow].p_slower < 1e-6
    code, text = _run(base, new)
    assert code == 1 and "REGRESSION" in text and "1 regression(s)" in text


def test_30_percent_difference_with_3_noisy_samples_is_not_significant(tmp_path, rng):
    key = make_key()
    base_samples = np.array([10.0, 14.0, 9.0])
    new_samples = base_samples * 1.3 + np.array([0.5, -3.0, 1.0])  # median 1.3x, but the samples overlap
    base = synthetic_report(tmp_path / "a.csv", {key: base_samples})
    new = synthetic_report(tmp_path / "b.csv", {key: new_samples})
    (row,) = compare_reports(base, new).rows
    assert row.ratio > 1.1 and row.verdict == NOT_SIGNIFICANT and row.p_slower > 0.002
    assert _run(base, new)[0] == 0
    # Even three perfectly separated samples are not enough at asv's 0.002 (the smallest one-sided p is 1/20).
    separated = synthetic_report(tmp_path / "c.csv", {key: base_samples * 1.3 + 10})
    (row,) = compare_reports(base, separated).rows
    assert row.verdict == NOT_SIGNIFICANT and row.p_slower == pytest.approx(0.05)


def test_a_slow_stretch_in_some_rounds_is_transient_not_a_regression(tmp_path, rng):
    # A shared machine can run everything 25-60 % slower for ~20 s of an A/A run. NEW had that
    # stretch in two of its three rounds: the pooled median is >10 % up and significant, the best round is not.
    key = make_key()
    base = synthetic_report(tmp_path / "a.csv", {key: lognormal(rng, 10.0, 3000)})
    new_values = np.concatenate([lognormal(rng, 10.0, 1000), lognormal(rng, 14.0, 1000), lognormal(rng, 14.0, 1000)])
    new = synthetic_report(tmp_path / "b.csv", {key: new_values})
    (row,) = compare_reports(base, new).rows
    assert row.ratio > 1.2 and row.p_slower < 1e-6 and 0.97 < row.best_round_ratio < 1.03
    assert row.verdict == TRANSIENT
    code, text = _run(base, new)
    assert code == 0 and "transient" in text and "some rounds only" in text
    # The same slowdown in every round is a regression.
    everywhere = synthetic_report(tmp_path / "c.csv", {key: lognormal(rng, 14.0, 3000)})
    (row,) = compare_reports(base, everywhere).rows
    assert row.verdict == REGRESSION and row.best_round_ratio > 1.3


def test_speedup_is_an_improvement_not_a_regression(tmp_path, rng):
    key = make_key()
    base = synthetic_report(tmp_path / "a.csv", {key: lognormal(rng, 10.0, 500)})
    new = synthetic_report(tmp_path / "b.csv", {key: lognormal(rng, 6.0, 500)})
    (row,) = compare_reports(base, new).rows
    assert row.verdict == IMPROVEMENT
    assert _run(base, new)[0] == 0


def test_small_significant_change_within_threshold_is_not_a_regression(tmp_path, rng):
    key = make_key()
    base = synthetic_report(tmp_path / "a.csv", {key: lognormal(rng, 10.0, 5000, sigma=0.02)})
    new = synthetic_report(tmp_path / "b.csv", {key: lognormal(rng, 10.5, 5000, sigma=0.02)})
    (row,) = compare_reports(base, new).rows
    assert row.p_slower < 1e-6 and row.verdict == SAME  # significant, but 5% < the 10% threshold
    (row,) = compare_reports(base, new, threshold=0.03).rows
    assert row.verdict == REGRESSION


def test_rows_in_only_one_report_are_listed(tmp_path, rng):
    shared, gone, added = make_key(baseline="fused"), make_key(baseline="native"), make_key(baseline="ort", variant="custom-run")
    base = synthetic_report(tmp_path / "a.csv", {shared: lognormal(rng, 5, 100), gone: lognormal(rng, 9, 100)})
    new = synthetic_report(tmp_path / "b.csv", {shared: lognormal(rng, 5, 100), added: lognormal(rng, 4, 100)})
    comparison = compare_reports(base, new)
    assert comparison.only_in_base == [gone] and comparison.only_in_new == [added]
    assert [r.key for r in comparison.rows] == [shared]
    code, text = _run(base, new)
    assert code == 0
    assert "only in BASE: op 8x128x1024 float32 native call" in text
    assert "only in NEW: op 8x128x1024 float32 ort custom-run" in text


def test_schema_mismatch_and_non_reports_are_clear_errors(tmp_path, rng):
    good = synthetic_report(tmp_path / "a.csv", {make_key(): lognormal(rng, 5, 10)})
    other = synthetic_report(tmp_path / "b.csv", {make_key(): lognormal(rng, 5, 10)}, schema_version=SCHEMA_VERSION + 1)
    code, text = _run(good, other)
    assert code == 2 and "schema version" in text and "b.csv" in text
    junk = tmp_path / "junk.csv"
    junk.write_text("name,value\nx,1\n")
    code, text = _run(junk, good)
    assert code == 2 and "not a fusedbench report" in text
    code, text = _run(tmp_path / "missing.csv", good)
    assert code == 2 and "no such report file" in text


def test_bad_threshold_or_alpha_is_a_clear_error(tmp_path, rng):
    csv = synthetic_report(tmp_path / "a.csv", {make_key(): lognormal(rng, 5, 10)})
    assert "threshold must be >= 0" in _run(csv, csv, threshold=-0.1)[1]
    assert "alpha must be between 0 and 1" in _run(csv, csv, alpha=2.0)[1]


def test_bootstrap_interval_covers_the_true_ratio(rng):
    covered = 0
    for _ in range(40):
        base, new = lognormal(rng, 10.0, 200, sigma=0.3), lognormal(rng, 12.0, 200, sigma=0.3)
        low, high = bootstrap_ratio_interval(base, new, rng)
        covered += low <= 1.2 <= high
    assert covered >= 33  # nominal 95 % of 40 = 38; binomial slack


def test_invoke_compare_cli_exit_codes(tmp_path, rng):
    key = make_key()
    base = synthetic_report(tmp_path / "a.csv", {key: lognormal(rng, 10.0, 1000)})
    slower = synthetic_report(tmp_path / "b.csv", {key: lognormal(rng, 13.0, 1000)})
    # The command line once (an interpreter start costs seconds); the other
    # verdicts through the task itself, which maps them to exit codes.
    command = [sys.executable, "-m", "invoke", "--search-root", str(REPO_ROOT), "bench.compare"]
    regressed = subprocess.run([*command, str(base), str(slower)], capture_output=True, text=True, cwd=tmp_path)
    assert regressed.returncode == 1 and "REGRESSION" in regressed.stdout
    tasks.compare(Context(), str(base), str(base))  # no regression: returns, exit code 0
    tasks.compare(Context(), str(base), str(slower), threshold="0.5")  # 30% slower is within 50%
    with pytest.raises(Exit) as stopped:
        tasks.compare(Context(), str(base), str(slower), threshold="0.2")
    assert stopped.value.code == 1


@pytest.mark.parametrize("n", [7, 101, 400])
def test_exact_bootstrap_medians_match_brute_force_resampling(rng, n):
    from bench.compare import bootstrap_medians

    samples = lognormal(rng, 10.0, n, sigma=0.4)
    brute = np.median(samples[rng.integers(0, n, size=(20000, n))], axis=1)
    exact = bootstrap_medians(samples, rng, resamples=20000)
    # Same distribution: quantiles agree to within the sampling error of 20000 draws
    # (numpy averages the two middle values for even n, the exact draw takes the lower one).
    for q in (0.025, 0.25, 0.5, 0.75, 0.975):
        assert np.quantile(exact, q) == pytest.approx(np.quantile(brute, q), rel=0.02)
