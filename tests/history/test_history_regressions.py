"""The regression view: each report against the previous of its machine and options; change points; --check."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from bench.history.changepoints import find_changes
from bench.history.cli import EXIT_OK, EXIT_REGRESSION, HistoryOptions, main
from bench.history.labels import Labels
from bench.history.reader import samples_path
from bench.history.regressions import advisory_regressions, judge_history, open_regressions
from bench.history.sources import INSUFFICIENT, KEY_COLUMNS, REGRESSION
from bench.history.store import connect, ingest
from bench.history.synthetic import sha_of, write_history
from tests.history.fixtures import REGRESSED_ROW, aa_history, regressed_history, seed_of


def _store(history, tmp_path):
    write_history(history, tmp_path / "reports")
    con = connect(":memory:")
    ingest(con, [tmp_path / "reports"], Labels({}))
    judge_history(con)
    return con


def _check(tmp_path, advisory=(), site=None) -> tuple[int, str]:
    console = Console(record=True, width=250)
    options = HistoryOptions(
        roots=[tmp_path / "reports"],
        db=tmp_path / "h.duckdb",
        labels=None,
        check=True,
        advisory=list(advisory),
        site=site,
    )
    return main(options, console), console.export_text()


def _site_sections(index) -> dict[str, str]:
    """The overview page's open-regression and advisory sections, as text between their headings."""
    html = index.read_text(encoding="utf-8")
    open_part = html.split("<h2>open regressions</h2>", 1)[1].split("<h2>", 1)[0]
    advisory_part = (
        html.split("<h2>advisory reports</h2>", 1)[1].split("<h2>", 1)[0] if "advisory reports" in html else ""
    )
    return {"open": open_part, "advisory": advisory_part}


def _move_commit(paths, commit: int, folder) -> None:
    """Move every machine's report of ``commit`` (and its samples) into ``folder``, as CI's own run lies."""
    moved = 0
    for path in paths:
        frame = pd.read_csv(path)
        if frame["git_commit"].iloc[0] != sha_of(commit):
            continue
        target = folder / path.parent.name
        target.mkdir(parents=True, exist_ok=True)
        for part in (path, samples_path(path)):
            part.rename(target / part.name)
        moved += 1
    assert moved == 2  # one a machine


def test_check_fails_on_an_injected_regression_and_names_it(tmp_path, request):
    write_history(regressed_history(seed_of(request), commits=6, slowdown=1.3), tmp_path / "reports")
    code, text = _check(tmp_path)
    assert code == EXIT_REGRESSION, text
    con = connect(tmp_path / "h.duckdb")
    found = open_regressions(con)
    assert set(map(tuple, found[list(KEY_COLUMNS)].values.tolist())) == {REGRESSED_ROW}
    assert set(found["sha"]) == {sha_of(5)} and len(found) == 2  # the last commit, on both machines
    assert "open regressions" in text and "8x128x1024" in text


def test_an_advisory_report_is_judged_and_shown_but_does_not_fail_the_check(tmp_path, request):
    paths = write_history(regressed_history(seed_of(request), commits=6, slowdown=1.3), tmp_path / "reports")
    advisory = tmp_path / "reports" / "ci"
    _move_commit(paths, 5, advisory)
    code, text = _check(tmp_path, [advisory], site=tmp_path / "site")
    assert code == EXIT_OK, text
    assert "open regressions (latest report of each machine and run options): none - OK" in text
    # The site agrees: nothing open, the advisory run's regression listed apart, on both machines.
    sections = _site_sections(tmp_path / "site" / "index.html")
    assert 'id="regressions"' in sections["open"] and "none" in sections["open"]
    assert 'class="advisory"' in sections["advisory"] and sections["advisory"].count(sha_of(5)[:10]) == 2
    con = connect(tmp_path / "h.duckdb")
    shown = advisory_regressions(con, [advisory])
    assert set(map(tuple, shown[list(KEY_COLUMNS)].values.tolist())) == {REGRESSED_ROW}
    assert set(shown["sha"]) == {sha_of(5)} and len(shown) == 2
    assert "advisory reports" in text and "8x128x1024" in text
    con.close()
    # The same store without the advisory folder: the regression fails the check.
    code, _ = _check(tmp_path)
    assert code == EXIT_REGRESSION


def test_an_advisory_report_does_not_hide_a_regression_of_the_history_before_it(tmp_path, request):
    history = regressed_history(seed_of(request), commits=7, slowdown=1.3)
    history.slowdown = {REGRESSED_ROW: (5, 1.3)}  # slower from commit 5 on: 5 regressed, 6 the same as 5
    paths = write_history(history, tmp_path / "reports")
    advisory = tmp_path / "reports" / "ci"
    _move_commit(paths, 6, advisory)
    code, text = _check(tmp_path, [advisory])
    assert code == EXIT_REGRESSION, text
    con = connect(tmp_path / "h.duckdb")
    found = open_regressions(con, [advisory])
    assert set(found["sha"]) == {sha_of(5)} and len(found) == 2
    assert set(map(tuple, found[list(KEY_COLUMNS)].values.tolist())) == {REGRESSED_ROW}
    assert advisory_regressions(con, [advisory]).empty  # commit 6 is no slower than commit 5


def test_check_passes_an_aa_history(tmp_path, request):
    write_history(aa_history(seed_of(request), commits=6), tmp_path / "reports")
    code, text = _check(tmp_path)
    assert code == EXIT_OK, text
    con = connect(tmp_path / "h.duckdb")
    verdicts = dict(con.execute("SELECT verdict, count(*) FROM judgements GROUP BY 1").fetchall())
    assert REGRESSION not in verdicts and INSUFFICIENT not in verdicts


def test_each_row_is_judged_against_the_previous_report_of_its_machine_with_the_units_statistics(tmp_path, request):
    con = _store(aa_history(seed_of(request), commits=3), tmp_path)
    pairs = con.execute(
        """SELECT j.ratio, j.units, j.ci_low, j.ci_high, pu.sha AS prev_sha, nu.sha AS new_sha,
                  pm.label AS prev_label, nm.label AS new_label, j.report_id, j.previous_id, j.workload, j.shape,
                  j.baseline, j.variant
           FROM judgements j JOIN runs nu ON nu.report_id = j.report_id JOIN runs pu ON pu.report_id = j.previous_id
           JOIN machines nm ON nm.machine_key = nu.machine_key JOIN machines pm ON pm.machine_key = pu.machine_key"""
    ).df()
    assert len(pairs) == 2 * 2 * 21  # 2 machines x 2 later commits x 21 rows
    assert (pairs.prev_label == pairs.new_label).all()
    assert {(p, n) for p, n in zip(pairs.prev_sha, pairs.new_sha, strict=True)} == {
        (sha_of(0), sha_of(1)),
        (sha_of(1), sha_of(2)),
    }
    for r in pairs.sample(5, random_state=0).itertuples():
        units = {}
        for side, report in (("new", r.report_id), ("prev", r.previous_id)):
            units[side] = np.array(
                [
                    u[0]
                    for u in con.execute(
                        "SELECT unit_us FROM units WHERE report_id = ? AND workload = ? AND shape = ? AND baseline = ? "
                        "AND variant = ?",
                        [report, r.workload, r.shape, r.baseline, r.variant],
                    ).fetchall()
                ]
            )
        # the ratio of the units' geometric means, from float64 math here
        expected = np.exp(np.log(units["new"]).mean() - np.log(units["prev"]).mean())
        assert r.ratio == pytest.approx(expected, rel=1e-9)
        assert r.units == 6 and r.ci_low <= r.ratio <= r.ci_high


def test_reports_without_samples_get_insufficient_data_never_a_verdict(tmp_path, request):
    con = _store(regressed_history(seed_of(request), commits=4, slowdown=1.5), tmp_path)
    con.execute("DELETE FROM units")
    con.execute("DELETE FROM judgements")
    judge_history(con)
    verdicts = con.execute("SELECT DISTINCT verdict FROM judgements").fetchall()
    assert verdicts == [(INSUFFICIENT,)]
    ratios = con.execute(
        "SELECT median_ratio FROM judgements WHERE workload = 'op' AND shape = '8x128x1024' AND baseline = 'fused' "
        "AND variant = 'call' AND report_id IN (SELECT report_id FROM runs WHERE sha = ?)",
        [sha_of(3)],
    ).fetchall()
    assert all(1.3 < r[0] < 1.7 for r in ratios) and len(ratios) == 2
    assert open_regressions(con).empty


def test_a_step_in_the_medians_is_found_at_its_commit_with_its_size(request):
    rng = np.random.default_rng(seed_of(request))
    found = 0
    for _ in range(50):
        values = 100 * np.exp(rng.normal(0, 0.02, 14))
        values[8:] *= 1.25
        changes = find_changes(values, threshold=0.10)
        if [c.index for c in changes] == [8]:
            found += 1
            assert changes[0].size == pytest.approx(1.25, rel=0.06)
    assert found >= 48  # 25 % against 2 % noise: all but a rare draw


def test_change_points_false_alarm_rate_on_aa_series(request):
    rng = np.random.default_rng(seed_of(request))
    series = [100 * np.exp(rng.normal(0, 0.03, 14)) for _ in range(200)]
    alarms = sum(bool(find_changes(values, threshold=0.10)) for values in series)
    assert alarms <= 4  # at most 2 % of identical-code series flag a shift of 10 % or more


def test_the_smallest_level_shift_named_keeps_identical_code_quiet_where_the_verdicts_threshold_would_not():
    from bench.experiments.shift_size import false_alarms
    from bench.history.changepoints import MIN_SHIFT
    from bench.stats.verdicts import DEFAULT_THRESHOLD

    # 300 series of 14 medians at 3 % noise (seed 0: 45 at 3 %, 0 at 10 %; over 1000 series 15.7 % and 0 %).
    assert false_alarms(300, 14, 0.03, MIN_SHIFT) <= 3
    assert false_alarms(300, 14, 0.03, DEFAULT_THRESHOLD) >= 20


def test_short_series_are_not_tested():
    assert find_changes(np.array([1.0, 1.0, 2.0, 2.0, 2.0]), 0.1) == []


def test_a_report_ingested_late_becomes_the_previous_of_the_next_and_both_are_judged_again(tmp_path, request):
    paths = write_history(aa_history(seed_of(request), commits=3), tmp_path / "all")
    late = [p for p in paths if p.name.startswith("20261101T01")]  # commit 1 of each machine
    assert len(late) == 2
    held = tmp_path / "later"
    held.mkdir()
    for path in late:
        for part in (path, path.with_name(path.stem + ".samples.npz")):
            part.rename(held / f"{path.parent.name}-{part.name}")
    con = connect(":memory:")
    ingest(con, [tmp_path / "all"], Labels({}))
    assert judge_history(con) == 2 * 21  # commit 2 against commit 0, per machine
    ingest(con, [tmp_path / "all", held], Labels({}))
    assert judge_history(con) == 2 * 2 * 21  # commit 1 against 0, and commit 2 again, now against 1
    previous = con.execute(
        "SELECT DISTINCT p.sha, n.sha FROM judgements j JOIN runs n ON n.report_id = j.report_id "
        "JOIN runs p ON p.report_id = j.previous_id"
    ).fetchall()
    assert sorted(previous) == sorted([(sha_of(0), sha_of(1)), (sha_of(1), sha_of(2))])
    assert con.execute("SELECT count(*) FROM judgements").fetchone()[0] == 2 * 2 * 21


def test_an_a_b_runs_page_judges_its_paired_sides_at_the_paired_threshold_not_the_historys(tmp_path, request):
    # A 6 % slowdown in every pair of an A/B run: the run itself calls it a REGRESSION (3 %), and so must its page,
    # though the history holds separate reports at 10 %.
    from bench.history.regressions import DEFAULT_THRESHOLD as HISTORY_THRESHOLD
    from tests.helpers.bench_synthetic import in_rounds, make_key, synthetic_report

    rng = np.random.default_rng(seed_of(request))
    keys = [make_key(shape=s, baseline=b) for s in ("1x8x512", "8x128x1024") for b in ("unfused", "fused")]
    slowed = keys[1]
    folder = tmp_path / "reports" / "ab" / "20261101T000000Z-aaaa-vs-bbbb"
    process = rng.lognormal(0.0, 0.02, (len(keys), 10))  # each pair's shared state, the same on both sides
    sides = {}
    for side, factor in (("base", 1.0), ("new", 1.06)):
        samples = {}
        for j, key in enumerate(keys):
            units = 10.0 * (j + 1) * process[j] * (factor if key == slowed else 1.0)
            samples[key] = in_rounds(np.repeat(units, 40) * rng.lognormal(0.0, 0.002, 400), rounds=10)
        (folder / side).mkdir(parents=True)
        stamp = {"timestamp_utc": "20261101T000000Z", "git_commit": sha_of(0 if side == "base" else 1)}
        sides[side] = synthetic_report(folder / side / "pooled.csv", samples, environment=stamp)
    options = HistoryOptions(roots=[tmp_path / "reports"], db=tmp_path / "h.duckdb", labels=None, site=tmp_path / "s")
    assert options.threshold == HISTORY_THRESHOLD > 0.06  # the history's own threshold would not call 6 %
    assert main(options, Console(record=True, width=250)) == EXIT_OK
    pages = list((tmp_path / "s" / "ab").glob("*.html"))
    text = " ".join(p.read_text(encoding="utf-8") for p in pages)
    verdicts = text.split('data-metric="verdict">')[1:]
    flagged = [v for v in verdicts if v.startswith(f"{REGRESSION}<")]
    assert len(pages) == 1 and len(verdicts) == len(keys) and len(flagged) == 1
    assert "op 1x8x512 float32 fused call" in text.split(f'data-metric="verdict">{REGRESSION}<')[0].rsplit("<tr>", 1)[1]
