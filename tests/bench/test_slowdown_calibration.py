"""The slowdown calibration's arithmetic: each row's next percent from what it delivered, and its table file."""

from __future__ import annotations

import pytest

from bench.experiments.slowdown_calibration import (
    fitted_percent,
    fitted_table,
    next_percent,
    pooled_lines,
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


def test_a_line_through_every_iteration_finds_the_percent_and_the_fixed_cost():
    # delivered - 1 = 0.01 + 0.9 * percent / 100 at three percents: 5 % is delivered at (0.05 - 0.01) / 0.009.
    points = [(p, 1 + 0.01 + 0.009 * p, 1 + 0.009 * p - 0.02, 1 + 0.009 * p + 0.04) for p in (3.0, 5.0, 8.0)]
    assert fitted_percent(points, 5) == pytest.approx(4.4444, abs=1e-3)
    # A far wider point pulls the line less than a narrow one; one beyond MAX_INTERVAL_WIDTH not at all.
    wide = [*points, (6.0, 1.30, 1.10, 1.30)]
    unweighted = fitted_percent([(p, d, 0.0, 0.06) for p, d, _, _ in wide], 5)
    assert unweighted < fitted_percent(wide, 5) < 4.4444
    assert fitted_percent([*points, (6.0, 2.0, 0.5, 3.0)], 5) == pytest.approx(4.4444, abs=1e-3)
    # One percent measured: the proportional rule; nothing measurable or a falling line: no percent.
    assert fitted_percent([(5.0, 1.10, 1.08, 1.12)], 5) == pytest.approx(2.5)
    assert fitted_percent([(5.0, 1.001, 0.99, 1.01)], 5) is None
    assert fitted_percent([(3.0, 1.08, 1.06, 1.10), (6.0, 1.04, 1.02, 1.06)], 5) is None


def test_the_fitted_table_keys_each_entry_point_and_fits_its_layouts_together(tmp_path):
    line = {"asked_percent": "5", "shape": "1x8x512", "dtype": "float32"}
    lines = [
        {**line, "variant": "call", "table_percent": "5", "delivered": "1.06", "ci_low": "1.04", "ci_high": "1.08"},
        {**line, "variant": "call", "table_percent": "5", "delivered": "1.08", "ci_low": "1.06", "ci_high": "1.10"},
        {**line, "variant": "out", "table_percent": "4", "delivered": "1.08", "ci_low": "1.06", "ci_high": "1.10"},
        {**line, "variant": "out", "asked_percent": "10", "table_percent": "9", "delivered": "1.5"},  # another P
    ]
    table = fitted_table(lines, 5)
    assert table == {("1x8x512", "float32", "call"): pytest.approx(3.571, abs=1e-3), ("1x8x512", "float32", "out"): 2.5}
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


def test_power_runs_pooled_ratios_join_the_fit_at_the_percent_their_build_used(tmp_path):
    (tmp_path / "delivered.csv").write_text(
        "comparison,slowdown_pct,row,runs,delivered,ci_low,ci_high\n"
        "quick A/B,0,out 1x8x512 natural,7,1.001,0.995,1.007\n"
        "quick A/B,5,out 1x8x512 natural,7,1.0425,1.0315,1.0537\n"
        "quick A/B,5,call 8x128x1024 page_offset,7,1.046,1.034,1.058\n"
    )
    used = {("1x8x512", "float32", "out"): 2.567, ("8x128x1024", "float32", ""): 7.3}
    lines = pooled_lines(tmp_path / "delivered.csv", used, 5)
    assert [(x["variant"], x["shape"], x["table_percent"], x["delivered"]) for x in lines] == [
        ("out", "1x8x512", "2.567", "1.0425"),
        ("call", "8x128x1024", "7.3", "1.046"),
    ]
    # Alone, a pooled point sets the percent by the proportional rule: 2.567 * 5 / 4.25.
    assert fitted_table(lines, 5)[("1x8x512", "float32", "out")] == pytest.approx(3.02, abs=0.01)
