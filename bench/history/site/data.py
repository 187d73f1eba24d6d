"""What each page of the site shows, queried from the store as plain values (no HTML here).

The headline of a machine is read from one report (its latest with the op's
rows), so its ratios are taken between rows measured in one run, as
everywhere in the project: fused/call against each other baseline and
variant at the same shape, dtype and device, as peer median / fused median
(above 1: fused is faster), and the fused rows' copy shares as the report
states them.
"""

from __future__ import annotations

import hashlib
import math
import re

import duckdb
import numpy as np
import pandas as pd
from scipy.stats import t as student_t

from bench.history.sources import KEY_COLUMNS, op_layouts, targets_of

FUSED = ("fused", "call")
INTERVAL_CONFIDENCE = 0.95


def row_slug(key: tuple[str, ...]) -> str:
    """A file name for a row key: readable, safe on any file system, unique by a hash of the exact key."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(key))[:80]
    return f"{readable}-{hashlib.sha1(chr(31).join(key).encode()).hexdigest()[:8]}"


def ab_slug(folder: str) -> str:
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(folder.split("/")[-2:]))[:60]
    return f"{readable}-{hashlib.sha1(folder.encode()).hexdigest()[:8]}"


def options_text(option: dict) -> str:
    threads = option.get("threads", "")
    return f"{threads} thread{'' if threads == '1' else 's'}, torch {option.get('torch', '')}"


def machines(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    return con.execute(
        """SELECT m.*, count(u.report_id) AS runs, min(u.started_at) AS first_run, max(u.started_at) AS last_run
           FROM machines m LEFT JOIN runs u USING (machine_key) GROUP BY ALL ORDER BY m.label, m.machine_key"""
    ).df()


def runs(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    return con.execute(
        """SELECT u.*, m.label, m.cpu_model, m.machine_id, m.gpus, o.threads, o.torch, o.onnxruntime, o.cpu_allocator,
                  o.timer, c.subject, c.committed_at
           FROM runs u JOIN machines m USING (machine_key) JOIN options o USING (options_key)
           LEFT JOIN commits c USING (sha) ORDER BY u.started_at, u.path"""
    ).df()


def latest_headline_runs(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Per machine and run options, the latest report that measured the fused op's call."""
    return con.execute(
        """SELECT * FROM (
             SELECT u.report_id, u.machine_key, u.options_key, u.started_at, u.sha, u.dirty, u.path,
                    row_number() OVER (PARTITION BY u.machine_key, u.options_key
                                       ORDER BY u.started_at DESC, u.path DESC) AS k
             FROM runs u WHERE EXISTS (SELECT 1 FROM rows r WHERE r.report_id = u.report_id AND r.workload = 'op'
                                       AND r.baseline = 'fused' AND r.variant = 'call'))
           WHERE k = 1"""
    ).df()


def headline(con: duckdb.DuckDBPyConnection, report_id: str) -> pd.DataFrame:
    """Per op shape, dtype and device of one report: fused/call's median, each peer's speed-up, the copy shares;
    at the natural layout (a report from before the layout column: at the one it has)."""
    rows = con.execute("SELECT * FROM rows WHERE report_id = ? AND workload = 'op'", [report_id]).df()
    layout = (op_layouts(rows) or [""])[0]
    rows = rows[rows.layout == layout]
    lines = []
    for (shape, dtype, device), group in rows.groupby(["shape", "dtype", "device"], sort=False):
        fused = group[(group.baseline == FUSED[0]) & (group.variant == FUSED[1])]
        if fused.empty:
            continue
        fused_median = float(fused.median_us.iloc[0])
        line = {"shape": shape, "dtype": dtype, "device": device, "layout": layout, "fused_call_us": fused_median}
        out = group[(group.baseline == "fused") & (group.variant == "out")]
        line["copy_share_call"] = float(fused.copy_share.iloc[0])
        line["copy_share_out"] = float(out.copy_share.iloc[0]) if len(out) else math.nan
        peers = group[group.baseline != "fused"]
        line["peers"] = {f"{p.baseline}/{p.variant}": float(p.median_us) / fused_median for p in peers.itertuples()}
        lines.append(line)
    return pd.DataFrame(lines)


def targets(con: duckdb.DuckDBPyConnection, report_id: str) -> list[tuple[str, bool | None, str]]:
    """The declared targets on one report's rows; a report the targets cannot read says why, as one line."""
    rows = con.execute(
        "SELECT r.*, u.started_at FROM rows r JOIN runs u USING (report_id) WHERE report_id = ?", [report_id]
    ).df()
    try:
        return targets_of(rows)
    except (KeyError, ValueError, TypeError, IndexError, AttributeError) as error:
        return [("targets", None, f"not judged: {type(error).__name__} {error}")]


def row_keys(con: duckdb.DuckDBPyConnection) -> list[tuple[str, ...]]:
    columns = ", ".join(KEY_COLUMNS)
    return [tuple(r) for r in con.execute(f"SELECT DISTINCT {columns} FROM rows ORDER BY {columns}").fetchall()]


def series_points(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Every row of every run with the interval of its units' geometric mean (NaN where fewer than 2 units)."""
    points = con.execute(
        f"""SELECT r.report_id, {", ".join(f"r.{c}" for c in KEY_COLUMNS)}, r.median_us, r.n, r.rounds,
                   u.machine_key, u.options_key, u.started_at, u.path, u.sha, u.dirty,
                   count(n.unit_us) AS units, avg(ln(n.unit_us)) AS log_mean, stddev_samp(ln(n.unit_us)) AS log_sd
            FROM rows r JOIN runs u USING (report_id)
            LEFT JOIN units n ON n.report_id = r.report_id AND {" AND ".join(f"n.{c} = r.{c}" for c in KEY_COLUMNS)}
            GROUP BY ALL ORDER BY u.started_at, u.path"""
    ).df()
    counts = points["units"].to_numpy(dtype=float)
    quantile = np.where(counts >= 2, student_t.ppf(0.5 + INTERVAL_CONFIDENCE / 2, np.maximum(counts - 1, 1)), np.nan)
    half = quantile * points["log_sd"].to_numpy(dtype=float) / np.sqrt(np.maximum(counts, 1))
    points["ci_low_us"] = np.exp(points["log_mean"] - half)
    points["ci_high_us"] = np.exp(points["log_mean"] + half)
    return points


def judgements(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    return con.execute("SELECT * FROM judgements").df()


def ab_runs(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """A/B runs with both sides ingested: folder, and each side's report."""
    return con.execute(
        """SELECT b.ab_run, b.report_id AS base_id, n.report_id AS new_id
           FROM runs b JOIN runs n ON n.ab_run = b.ab_run AND n.ab_side = 'new'
           WHERE b.ab_side = 'base' ORDER BY b.started_at, b.ab_run"""
    ).df()


def units_of(con: duckdb.DuckDBPyConnection, report_id: str) -> dict[tuple[str, ...], np.ndarray]:
    frame = con.execute(
        f"SELECT {', '.join(KEY_COLUMNS)}, round, unit_us FROM units WHERE report_id = ? ORDER BY round", [report_id]
    ).df()
    return {k: g["unit_us"].to_numpy() for k, g in frame.groupby(list(KEY_COLUMNS), sort=False)}


def rows_of(con: duckdb.DuckDBPyConnection, report_id: str) -> pd.DataFrame:
    return con.execute(f"SELECT * FROM rows WHERE report_id = ? ORDER BY {', '.join(KEY_COLUMNS)}", [report_id]).df()
