"""Each report judged against the previous report of the same machine and run options, row by row.

A row's previous is the latest earlier report of its machine and options that
measured the same row key (a 16-bit run between two fp32 runs does not hide
the earlier fp32 run). Where both rows kept their units (the samples
sidecar), the project's interval statistics judge them (sources.judge_units:
the ratio of geometric means with its interval, family-wise over the report's
counted rows, read against the threshold); where either did not, the verdict
is "insufficient data" and only the ratio of medians is shown, never a
verdict guessed from two numbers.

Judgements are kept in the store and redone only for rows whose previous
changed (a report ingested late, between two others).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from bench.history.sources import INSUFFICIENT, KEY_COLUMNS, LIMIT_WORKLOAD, REGRESSION, judge_units, row_alpha

# The history holds separate reports against each other, made hours or days apart. Whole rows of such reports
# move by a few per cent and more with no change of code, which no within-report variance sees (ten quick
# reports of one commit made in ten minutes: a 3 % shift that all twelve units agreed on, and rows 1.2-1.8x
# apart where a report's processes all landed on one level: reports/power_curves/separate_quick), so the
# history calls a regression only from 10 %, where the paired A/B run calls one from 3 %.
DEFAULT_THRESHOLD = 0.10
DEFAULT_ALPHA = 0.05
_KEYS = ", ".join(KEY_COLUMNS)
_ON = " AND ".join(f"a.{c} = b.{c}" for c in KEY_COLUMNS)
TABLE = f"""
CREATE TABLE IF NOT EXISTS judgements (report_id VARCHAR, {", ".join(f"{c} VARCHAR" for c in KEY_COLUMNS)},
    previous_id VARCHAR, previous_median_us DOUBLE, median_us DOUBLE, median_ratio DOUBLE,
    ratio DOUBLE, ci_low DOUBLE, ci_high DOUBLE, units INTEGER, verdict VARCHAR,
    threshold DOUBLE, alpha DOUBLE)
"""
# Every row with its previous in the same series (machine, options, row key), in the order the runs started.
PAIRS = f"""
SELECT * FROM (
  SELECT r.report_id, {", ".join(f"r.{c}" for c in KEY_COLUMNS)}, r.median_us,
         lag(r.report_id) OVER series AS previous_id, lag(r.median_us) OVER series AS previous_median_us
  FROM rows r JOIN runs u USING (report_id)
  WINDOW series AS (PARTITION BY u.machine_key, u.options_key, {", ".join(f"r.{c}" for c in KEY_COLUMNS)}
                    ORDER BY u.started_at, u.path)
) WHERE previous_id IS NOT NULL
"""


def judge_history(
    con: duckdb.DuckDBPyConnection, threshold: float = DEFAULT_THRESHOLD, alpha: float = DEFAULT_ALPHA
) -> int:
    """Bring the judgements table up to date; returns how many rows were (re)judged."""
    con.execute(TABLE)
    pairs = con.execute(PAIRS).df()
    done = con.execute(
        f"SELECT report_id, {_KEYS}, previous_id FROM judgements WHERE threshold = ? AND alpha = ?", [threshold, alpha]
    ).df()
    merged = pairs.merge(done, on=["report_id", *KEY_COLUMNS, "previous_id"], how="left", indicator=True)
    todo = merged[merged["_merge"] == "left_only"].drop(columns="_merge")
    if todo.empty:
        return 0
    judged = _judge(con, todo, threshold, alpha)
    con.register("fresh", judged)
    try:
        con.execute(f"DELETE FROM judgements a USING fresh b WHERE a.report_id = b.report_id AND {_ON}")
        columns = [r[0] for r in con.execute("DESCRIBE judgements").fetchall()]
        con.execute(f"INSERT INTO judgements SELECT {', '.join(columns)} FROM fresh")
    finally:
        con.unregister("fresh")
    return len(judged)


def _judge(con: duckdb.DuckDBPyConnection, todo: pd.DataFrame, threshold: float, alpha: float) -> pd.DataFrame:
    todo = todo.assign(median_ratio=todo["median_us"] / todo["previous_median_us"], threshold=threshold, alpha=alpha)
    ids = sorted(set(todo["report_id"]) | set(todo["previous_id"]))
    units = con.execute(
        f"SELECT report_id, {_KEYS}, unit_us FROM units WHERE report_id IN (SELECT unnest(?))", [ids]
    ).df()
    by_row = {k: g["unit_us"].to_numpy() for k, g in units.groupby(["report_id", *KEY_COLUMNS], sort=False)}
    # The family of a report: its counted rows (not the machine's limits) that have units on both sides.
    both = [
        (r.report_id, *key) in by_row and (r.previous_id, *key) in by_row
        for r, key in ((r, tuple(getattr(r, c) for c in KEY_COLUMNS)) for r in todo.itertuples())
    ]
    todo = todo.assign(both_units=both)
    counted = todo[todo["both_units"] & (todo["workload"] != LIMIT_WORKLOAD)].groupby("report_id").size()
    results = []
    for r in todo.itertuples():
        key = tuple(getattr(r, c) for c in KEY_COLUMNS)
        if not r.both_units:
            results.append((np.nan, np.nan, np.nan, 0, INSUFFICIENT))
            continue
        family = int(counted.get(r.report_id, 1))
        j = judge_units(by_row[(r.previous_id, *key)], by_row[(r.report_id, *key)], threshold, row_alpha(alpha, family))
        results.append((j.ratio, j.ci_low, j.ci_high, j.units, j.verdict))
    judged = pd.DataFrame(results, columns=["ratio", "ci_low", "ci_high", "units", "verdict"], index=todo.index)
    return pd.concat([todo.drop(columns="both_units"), judged], axis=1)


def open_regressions(con: duckdb.DuckDBPyConnection, advisory: Sequence[Path] = ()) -> pd.DataFrame:
    """REGRESSION rows (limit rows excluded: they measure the machine) in the latest report of each machine and
    run options: what ``--check`` fails on. Reports under an ``advisory`` folder are left out, so that one of
    them never stands in for the history's latest."""
    latest = """
        SELECT report_id FROM (
          SELECT report_id, row_number() OVER (PARTITION BY machine_key, options_key
                                               ORDER BY started_at DESC, path DESC) AS k
          FROM runs WHERE NOT list_contains(?, report_id))
        WHERE k = 1"""
    return _regressions(con, latest, advisory_reports(con, advisory))


def advisory_regressions(con: duckdb.DuckDBPyConnection, advisory: Sequence[Path]) -> pd.DataFrame:
    """REGRESSION rows of every report under an ``advisory`` folder, each against its previous: shown, never
    failing ``--check``."""
    return _regressions(con, "SELECT unnest(?) AS report_id", advisory_reports(con, advisory))


def advisory_reports(con: duckdb.DuckDBPyConnection, advisory: Sequence[Path]) -> list[str]:
    """The ids of the reports whose files lie under one of the ``advisory`` folders."""
    folders = [Path(f).resolve() for f in advisory]
    if not folders:
        return []
    runs = con.execute("SELECT report_id, path FROM runs").fetchall()
    return [rid for rid, path in runs if any(Path(path).resolve().is_relative_to(f) for f in folders)]


def _regressions(con: duckdb.DuckDBPyConnection, latest: str, ids: list[str]) -> pd.DataFrame:
    return con.execute(
        f"""
        WITH latest AS ({latest})
        SELECT j.*, m.label, u.path, u.sha FROM judgements j JOIN latest USING (report_id)
          JOIN runs u USING (report_id) JOIN machines m USING (machine_key)
        WHERE j.verdict = '{REGRESSION}' AND j.workload <> '{LIMIT_WORKLOAD}'
        ORDER BY m.label, j.workload, j.shape, j.dtype, j.baseline, j.variant
        """,
        [ids],
    ).df()
