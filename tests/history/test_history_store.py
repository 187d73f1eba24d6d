"""The store: ingest once per content, both schema versions, normalised tables, invalid reports listed, Parquet."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.history.export import export_parquet
from bench.history.labels import Labels
from bench.history.migrate import NOT_RECORDED
from bench.history.reader import samples_path
from bench.history.store import connect, ingest
from bench.history.synthetic import ROWS, SAMPLES_PER_ROUND, SHAPES, write_history
from env.paths import REPO_ROOT
from tests.history.fixtures import XEON, ZEN, aa_history, seed_of

NO_LABELS = Labels({})


@pytest.fixture
def history_dir(tmp_path, request) -> tuple[Path, list[Path]]:
    out = tmp_path / "reports"
    return out, write_history(aa_history(seed_of(request), commits=4), out)


def test_ingest_normalises_runs_machines_commits_and_keeps_rows_and_units(history_dir):
    out, paths = history_dir
    con = connect(":memory:")
    result = ingest(con, [out], NO_LABELS)
    assert (result.added, result.already, result.invalid) == (len(paths), 0, [])
    count = lambda table: con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # noqa: E731
    rows_per_report = len(SHAPES) * len(ROWS)
    assert count("runs") == len(paths) == 8
    assert count("rows") == len(paths) * rows_per_report
    assert count("units") == len(paths) * rows_per_report * 6
    assert count("commits") == 4
    machines = con.execute("SELECT label, machine_id, cpu_model FROM machines ORDER BY machine_id").fetchall()
    assert machines == [(XEON.cpu_model, "id-xeon", XEON.cpu_model), ("AMD EPYC", "id-zen", "AMD EPYC")]
    # a row keeps its measurements: the stored median is the CSV's, and each unit is its round's median
    csv = pd.read_csv(paths[0])
    stored = con.execute(
        "SELECT median_us FROM rows JOIN runs USING (report_id) WHERE path = ? AND shape = ? AND baseline = 'fused' "
        "AND variant = 'call'",
        [str(paths[0]), "4x64x768"],
    ).fetchone()[0]
    expected = csv[(csv["shape"] == "4x64x768") & (csv.baseline == "fused") & (csv.variant == "call")].median_us
    assert stored == pytest.approx(float(expected.iloc[0]), rel=1e-12)
    with np.load(samples_path(paths[0])) as data:
        first = data["samples_us"][:SAMPLES_PER_ROUND]  # the first row's round 0
        key = tuple(data["keys"][0])
    unit = con.execute(
        "SELECT unit_us FROM units JOIN runs USING (report_id) WHERE path = ? AND workload = ? AND shape = ? "
        "AND baseline = ? AND variant = ? AND round = 0",
        [str(paths[0]), key[0], key[1], key[3], key[4]],
    ).fetchone()[0]
    assert unit == pytest.approx(float(np.median(first)))


def test_ingest_is_incremental_and_keyed_by_content(history_dir, tmp_path):
    out, paths = history_dir
    db = tmp_path / "history.duckdb"
    con = connect(db)
    assert ingest(con, [out], NO_LABELS).added == len(paths)
    con.close()
    con = connect(db)  # a later run opens the same file
    again = ingest(con, [out], NO_LABELS)
    assert (again.added, again.already) == (0, len(paths))
    copies = tmp_path / "artifacts"  # the same report copied elsewhere (a CI artifact) is the same report
    copies.mkdir()
    shutil.copy(paths[0], copies / "copy.csv")
    shutil.copy(samples_path(paths[0]), samples_path(copies / "copy.csv"))
    assert ingest(con, [out, copies], NO_LABELS).added == 0
    frame = pd.read_csv(paths[1])
    frame["median_us"] *= 1.01  # one changed number: another report
    frame.to_csv(copies / "changed.csv", index=False)
    assert ingest(con, [out, copies], NO_LABELS).added == 1
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == len(paths) + 1


def test_schema_4_and_the_committed_reports_load_through_the_migration(history_dir, tmp_path):
    out, paths = history_dir
    old = pd.read_csv(paths[0]).drop(columns=["machine_id", "cpu_governor", "cpu_epp", "cpu_boost"])
    old = old.drop(columns=["cpu_freq_range_mhz", "gpu_policy"]).assign(schema_version=4)
    v4 = tmp_path / "v4"
    v4.mkdir()
    old.to_csv(v4 / "old.csv", index=False)
    baseline = tmp_path / "baseline"
    shutil.copytree(REPO_ROOT / "reports" / "baseline", baseline)  # real reports, one full run of schema 4 with samples
    con = connect(":memory:")
    result = ingest(con, [v4, baseline], NO_LABELS)
    assert (result.added, result.invalid) == (4, [])
    machines = dict(con.execute("SELECT path, machine_id FROM runs JOIN machines USING (machine_key)").fetchall())
    versions = dict(con.execute("SELECT path, schema_version FROM runs").fetchall())
    for path, version in versions.items():
        assert version in (4, 5, 6, 7), path
        if version == 4:  # schema 4 recorded no machine id: the migration says so rather than inventing one
            assert machines[path] == NOT_RECORDED, path
    assert sorted(v for p, v in versions.items() if p.endswith("old.csv")) == [4]
    assert [v for p, v in versions.items() if p.endswith("schema-4/cpu-all.csv")] == [4]
    full_units = con.execute(
        "SELECT count(*) FROM units JOIN runs USING (report_id) WHERE path LIKE '%schema-4/cpu-all.csv'"
    ).fetchone()[0]
    rows, rounds = pd.read_csv(REPO_ROOT / "reports" / "baseline" / "schema-4" / "cpu-all.csv")[
        ["workload", "rounds"]
    ].T.values
    assert full_units == sum(rounds)  # one unit per row and round, from the real v4 samples sidecar


@pytest.mark.parametrize(
    "spoil, reason",
    [
        (lambda f: f.assign(schema_version=3), "schema version 3"),
        (lambda f: f.assign(schema_version=99), "schema version 99"),
        (lambda f: f.assign(median_us=-1.0), "median_us must be a positive number"),
        (lambda f: f.drop(columns=["cpu_model"]), "columns missing: cpu_model"),
        (lambda f: pd.concat([f, f.iloc[:1]]), "more than one row for key"),
        (lambda f: f.assign(git_commit=["a", "b"] * (len(f) // 2) + ["a"] * (len(f) % 2)), "git_commit must hold"),
        (lambda f: f.assign(timestamp_utc="yesterday"), "timestamp_utc must be a UTC time"),
        (lambda f: f.assign(n=2.5), "n must be an integer"),
    ],
)
def test_an_invalid_report_is_listed_with_its_reason_and_nothing_else_is_lost(history_dir, spoil, reason):
    out, paths = history_dir
    bad = out / "bad" / "bad.csv"
    bad.parent.mkdir()
    spoil(pd.read_csv(paths[0])).to_csv(bad, index=False)
    (out / "bad" / "sweep.csv").write_text("shape,median_us\n1x8,3.0\n")  # not a report at all: passed over
    con = connect(":memory:")
    result = ingest(con, [out], NO_LABELS)
    assert result.added == len(paths)
    assert [(i.path, reason in i.reason) for i in result.invalid] == [(bad, True)], result.invalid
    assert result.not_reports == 1
    assert con.execute("SELECT path FROM invalid").fetchall() == [(str(bad),)]
    again = ingest(con, [out], NO_LABELS)  # listed again on every run, still skipped
    assert [i.path for i in again.invalid] == [bad] and again.added == 0


def test_a_broken_samples_sidecar_makes_its_report_invalid(history_dir):
    out, paths = history_dir
    samples_path(paths[0]).write_bytes(b"not an npz")
    result = ingest(connect(":memory:"), [out], NO_LABELS)
    assert [i.path for i in result.invalid] == [paths[0]] and "not a samples file" in result.invalid[0].reason
    assert result.added == len(paths) - 1


def test_labels_name_machines_by_folder(tmp_path, request):
    out = tmp_path / "reports"
    write_history(aa_history(seed_of(request), commits=2), out)
    labels = Labels({(out / ZEN.label.replace(" ", "_")).resolve(): "Zen 5 VM <b>"})
    con = connect(":memory:")
    ingest(con, [out], labels)
    assert sorted(r[0] for r in con.execute("SELECT label FROM machines").fetchall()) == sorted(
        ["Zen 5 VM <b>", XEON.cpu_model]
    )


def test_parquet_export_is_partitioned_by_machine_and_reads_back_whole(history_dir, tmp_path):
    out, paths = history_dir
    con = connect(":memory:")
    ingest(con, [out], NO_LABELS)
    from bench.history.regressions import judge_history

    judge_history(con)
    target = tmp_path / "parquet"
    export_parquet(con, target)
    keys = sorted(r[0] for r in con.execute("SELECT machine_key FROM machines").fetchall())
    assert sorted(p.name for p in (target / "rows").iterdir()) == [f"machine_key={k}" for k in keys]
    for table in ("runs", "rows", "units", "judgements"):
        back = con.execute(
            f"SELECT count(*) FROM read_parquet('{target / table}/*/*.parquet', hive_partitioning = true)"
        ).fetchone()[0]
        assert back == con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] > 0
    medians = con.execute(
        f"SELECT machine_key, sum(median_us) FROM read_parquet('{target}/rows/*/*.parquet', hive_partitioning = true) "
        "GROUP BY 1 ORDER BY 1"
    ).fetchall()
    direct = con.execute(
        "SELECT machine_key, sum(median_us) FROM rows JOIN runs USING (report_id) GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert [(k, pytest.approx(v)) for k, v in direct] == medians
    assert (target / "commits.parquet").is_file()


def test_commit_subjects_and_dates_come_from_git():
    import subprocess

    from bench.history.commits import describe, split_commit

    sha, subject, date = (
        subprocess.run(
            ["git", "-C", str(REPO_ROOT), "log", "-1", "--format=%H%n%s%n%cI"], capture_output=True, text=True
        )
        .stdout.strip()
        .split("\n")
    )
    found = describe([sha, "0" * 40, "<b>not a sha</b>"])
    assert list(found) == [sha]
    assert found[sha][0] == subject
    assert pd.Timestamp(found[sha][1]) == pd.Timestamp(date)
    assert split_commit(sha + "-dirty") == (sha, True) and split_commit(sha) == (sha, False)


def _report(folder: Path, rng, medians: dict[str, float]) -> Path:
    """A schema-7 report: the op row at each layout of ``medians``, and the copy at each."""
    from tests.helpers.bench_synthetic import lognormal, make_key, synthetic_report

    samples = {make_key(layout=layout): lognormal(rng, median, 60) for layout, median in medians.items()}
    for layout in medians:
        copy = make_key(workload="limit", baseline="copy", variant="into_preallocated", layout=layout)
        samples[copy] = lognormal(rng, 8.0, 60)
    folder.mkdir(parents=True)
    environment = {"timestamp_utc": "20261201T120000Z", "git_commit": "a" * 40, "threads": 1}
    return synthetic_report(folder / "r.csv", samples, environment=environment)


@pytest.mark.parametrize("version", [6, 7])
def test_the_layout_is_part_of_a_stored_row_and_an_earlier_report_takes_the_page_offset(tmp_path, rng, version):
    from tests.helpers.bench_synthetic import as_earlier_schema

    # Schema 7 measures both layouts (here the natural one twice as slow); schema 6 measured the page offset
    # alone, with no column saying so.
    medians = {"natural": 20.0, "page_offset": 10.0} if version == 7 else {"page_offset": 10.0}
    csv = _report(tmp_path / "reports", rng, medians)
    if version == 6:
        as_earlier_schema(csv, 6)
        assert "layout" not in pd.read_csv(csv).columns
    con = connect(":memory:")
    result = ingest(con, [tmp_path / "reports"], NO_LABELS)
    assert (result.added, result.invalid) == (1, [])
    stored = con.execute("SELECT layout, median_us FROM rows WHERE workload = 'op'").fetchall()
    assert sorted(layout for layout, _ in stored) == sorted(medians)
    for layout, median in stored:
        assert median == pytest.approx(medians[layout], rel=0.1)
    # Every row's units (one per round) under its own layout: the copy's too.
    units = con.execute("SELECT workload, layout, count(*) FROM units GROUP BY ALL").fetchall()
    assert sorted(units) == sorted((w, layout, 3) for w in ("op", "limit") for layout in medians)


@pytest.fixture
def rng(generator):
    return np.random.default_rng(int(generator.initial_seed()))
