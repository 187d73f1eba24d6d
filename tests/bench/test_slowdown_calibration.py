"""The slowdown calibration's arithmetic: each row's next percent from what it delivered, and its table file."""

from __future__ import annotations

import pytest

from bench.experiments.slowdown_calibration import (
    corrections,
    next_percent,
    read_table,
    table_percent,
    write_table,
)


def test_a_row_that_delivered_too_much_waits_proportionally_less_and_one_too_little_more():
    # Asked 10 %: 15 % delivered at 10 % -> 10 * 10 / 15; 8 % delivered at 12 % -> 12 * 10 / 8.
    assert next_percent(10, 10, 1.15) == pytest.approx(6.6667, abs=1e-4)
    assert next_percent(12, 10, 1.08) == pytest.approx(15.0)
    assert next_percent(10, 10, 1.10) == pytest.approx(10.0)  # on target: unchanged


def test_a_row_that_delivered_no_measurable_change_keeps_its_percent():
    assert next_percent(7.5, 10, 1.001) == 7.5 and next_percent(7.5, 10, 0.98) == 7.5
    # Measured beside other work: 1.512 [0.081, 28.15] says nothing; 1.153 [1.093, 1.215] does.
    assert next_percent(10, 10, 1.512, (0.081, 28.15)) == 10
    assert next_percent(10, 10, 1.153, (1.093, 1.215)) == pytest.approx(6.536, abs=1e-3)


def test_each_entry_point_gets_its_own_percent_from_the_geometric_mean_of_its_layouts(tmp_path):
    rows = [
        {"shape": "1x8x512", "dtype": "float32", "variant": "call", "layout": "natural", "next_percent": 4.0},
        {"shape": "1x8x512", "dtype": "float32", "variant": "call", "layout": "page_offset", "next_percent": 9.0},
        {"shape": "1x8x512", "dtype": "float32", "variant": "out", "layout": "natural", "next_percent": 3.0},
        {"shape": "8x128x1024", "dtype": "float32", "variant": "call", "layout": "natural", "next_percent": 11.0},
    ]
    table = corrections(rows, 10)
    assert table == {
        ("1x8x512", "float32", "call"): pytest.approx(6.0),
        ("1x8x512", "float32", "out"): pytest.approx(3.0),
        ("8x128x1024", "float32", "call"): pytest.approx(11.0),
    }
    write_table(tmp_path / "t.csv", table)
    assert read_table(tmp_path / "t.csv") == pytest.approx(table)
    assert (tmp_path / "t.csv").read_text().splitlines()[0] == "shape,dtype,variant,percent"


def test_a_table_without_the_variant_column_names_both_entry_points_and_a_named_one_wins(tmp_path):
    (tmp_path / "old.csv").write_text("shape,dtype,percent\n1x8x512,float32,4.688\n")
    old = read_table(tmp_path / "old.csv")
    assert old == {("1x8x512", "float32", ""): 4.688}
    assert table_percent(old, "1x8x512", "float32", "out", 10.0) == 4.688
    assert table_percent(old, "8x128x1024", "float32", "out", 10.0) == 10.0
    both = {**old, ("1x8x512", "float32", "out"): 3.0}
    assert table_percent(both, "1x8x512", "float32", "out", 10.0) == 3.0
    assert table_percent(both, "1x8x512", "float32", "call", 10.0) == 4.688
