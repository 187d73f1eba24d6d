"""bench/report/schema.py: the schema declared once, one row per key, atomic writes, clear errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bench.report import schema as report
from bench.report.schema import (
    COLUMN_NAMES,
    COLUMNS,
    KEY_COLUMNS,
    SCHEMA_VERSION,
    ReportError,
    ReportPaths,
    read_report,
    read_samples,
)
from tests.helpers.bench_synthetic import as_earlier_schema, in_rounds, lognormal, make_key, synthetic_report


@pytest.fixture
def rng(generator):
    return np.random.default_rng(int(generator.initial_seed()))


def test_written_report_has_the_declared_columns_dtypes_and_samples(tmp_path, rng):
    samples = {make_key(baseline=b): lognormal(rng, 10.0, 50) for b in ("unfused", "fused", "native")}
    csv = synthetic_report(tmp_path / "r.csv", samples)
    header = pd.read_csv(csv, nrows=0).columns.tolist()
    assert header == list(COLUMN_NAMES)
    frame = read_report(csv)
    for name, dtype, _ in COLUMNS:
        assert str(frame[name].dtype) == dtype, name
    assert not frame.duplicated(list(KEY_COLUMNS)).any() and len(frame) == 3
    back = read_samples(csv)
    assert set(back) == set(samples)
    for key, values in samples.items():
        np.testing.assert_array_equal(back[key].values, values)
        np.testing.assert_array_equal(back[key].rounds, np.repeat([0, 1, 2], [17, 17, 16]))  # 50 samples in 3 rounds
        assert len(back[key].round_medians()) == 3
        row = frame[(frame.baseline == key[3])].iloc[0]
        assert row.n == len(values) and row.median_us == pytest.approx(np.median(values))


def test_report_files_get_the_usual_mode_not_mkstemps_0600(tmp_path, rng):
    import os
    import stat

    umask = os.umask(0o022)
    try:
        csv = synthetic_report(tmp_path / "r.csv", {make_key(): lognormal(rng, 5.0, 10)})
    finally:
        os.umask(umask)
    for path in (csv, ReportPaths.for_csv(csv).samples):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_more_than_one_row_per_key_is_rejected(rng):
    row = {name: 1 for name in COLUMN_NAMES}
    with pytest.raises(ReportError, match="more than one row per key"):
        report.to_frame([row, dict(row)])


def test_rows_with_missing_or_extra_columns_are_rejected():
    row = {name: 1 for name in COLUMN_NAMES if name != "median_us"} | {"surprise": 2}
    with pytest.raises(ReportError, match=r"missing \['median_us'\], unexpected \['surprise'\]"):
        report.to_frame([row])


def test_other_schema_version_is_a_clear_error(tmp_path, rng):
    csv = synthetic_report(
        tmp_path / "old.csv", {make_key(): lognormal(rng, 5.0, 10)}, schema_version=SCHEMA_VERSION + 1
    )
    with pytest.raises(
        ReportError,
        match=f"schema version \\[{SCHEMA_VERSION + 1}\\] but this code reads versions 4, 5, 6, {SCHEMA_VERSION}",
    ):
        read_report(csv)


@pytest.mark.parametrize("content", ["a,b\n1,2\n", "", "\x00\x01garbage"])
def test_a_file_that_is_not_a_report_is_a_clear_error(tmp_path, content):
    path = tmp_path / "not.csv"
    path.write_text(content)
    with pytest.raises(ReportError, match="not a fusedbench report"):
        read_report(path)


def test_missing_samples_sidecar_is_a_clear_error(tmp_path, rng):
    csv = synthetic_report(tmp_path / "r.csv", {make_key(): lognormal(rng, 5.0, 10)})
    ReportPaths.for_csv(csv).samples.unlink()
    with pytest.raises(ReportError, match="samples sidecar .* is missing"):
        read_samples(csv)


def test_samples_must_belong_to_the_rows(tmp_path, rng):
    csv = synthetic_report(tmp_path / "r.csv", {make_key(): lognormal(rng, 5.0, 10)})
    with pytest.raises(ReportError, match="keys differ"):
        report.write_report(tmp_path / "s.csv", read_report(csv), {make_key(baseline="other"): in_rounds(np.ones(3))})


@pytest.mark.parametrize("failure", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_interrupted_write_leaves_no_half_file_and_the_old_report_untouched(tmp_path, rng, monkeypatch, failure):
    csv = synthetic_report(tmp_path / "r.csv", {make_key(): lognormal(rng, 5.0, 20)})
    paths = ReportPaths.for_csv(csv)
    old_csv, old_samples = paths.csv.read_bytes(), paths.samples.read_bytes()
    new_samples = {make_key(): in_rounds(lognormal(rng, 7.0, 20))}
    frame = read_report(csv)

    def half_then_fail(self, path, **kwargs):  # a CSV writer that dies after writing part of the file
        with open(path, "w") as handle:
            handle.write(",".join(COLUMN_NAMES)[:40])
        raise failure

    monkeypatch.setattr(pd.DataFrame, "to_csv", half_then_fail)
    with pytest.raises(type(failure)):
        report.write_report(csv, frame, new_samples)
    assert paths.csv.read_bytes() == old_csv and paths.samples.read_bytes() == old_samples
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([paths.csv.name, paths.samples.name])

    # A fresh target: nothing at all remains.
    with pytest.raises(type(failure)):
        report.write_report(tmp_path / "fresh.csv", frame, new_samples)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([paths.csv.name, paths.samples.name])


@pytest.mark.parametrize("version", [4, 5, 6])
def test_a_report_from_before_the_layout_column_reads_at_the_layout_it_measured(tmp_path, rng, version):
    # Before schema 7 every CPU input was placed at the process's page offset (the op's, the model's, the copy
    # reading the op's x); the floors and a GPU's rows placed nothing.
    placed = [
        make_key(layout="page_offset"),
        make_key(workload="model", shape="1x32x128", layout="page_offset"),
        make_key(workload="limit", baseline="copy", variant="into_preallocated", layout="page_offset"),
    ]
    natural = [
        make_key(workload="limit", shape="1", baseline="dispatch", variant="torch_noop"),
        make_key(device="NVIDIA H200"),
    ]
    samples = {key: lognormal(rng, 10.0, 20) for key in placed + natural}
    csv = as_earlier_schema(synthetic_report(tmp_path / "old.csv", samples), version)
    assert "layout" not in pd.read_csv(csv, nrows=0).columns
    frame = read_report(csv)
    assert frame.attrs["schema_version"] == version and set(frame.schema_version) == {SCHEMA_VERSION}
    keys = frame[list(KEY_COLUMNS[:-1])].values.tolist()
    layouts = {tuple(k): layout for k, layout in zip(keys, frame.layout, strict=True)}
    assert layouts == {tuple(k[:-1]): k.layout for k in placed + natural}
    back = read_samples(csv)
    assert set(back) == set(samples)  # the sidecar's keys gain the same layout
    for key, values in samples.items():
        np.testing.assert_array_equal(back[key].values, values)
