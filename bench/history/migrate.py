"""Every report schema the history reads, brought to the store's columns by one function: ``migrate``.

A report CSV carries its ``schema_version`` in every row. Version 4 lacks the
machine id and the power-policy columns that version 5 added, and version 5
the hardware facts that version 6 added; each step fills them with
NOT_RECORDED, so an earlier report joins the history without pretending to
know them. Version 7 added the layout to the row key: an earlier row takes
the layout it was measured at (bench/report/schema.py ``earlier_layout``).
A new version adds one step here (``_STEPS``) and, where it renames or adds
columns the store keeps, an entry in the lists below.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable

from bench.history.sources import HARDWARE_COLUMNS, KEY_COLUMNS, earlier_layout

NOT_RECORDED = "not recorded"
CURRENT = 7  # the version every step leads to
TIME_FORMAT = "%Y%m%dT%H%M%SZ"  # timestamp_utc, as bench writes it

# Facts of the run (one value per report) the store keeps in its runs table.
RUN_TEXT = ("timestamp_utc", "host", "git_commit", "torch", "onnxruntime", "onnx", "compiler", "cxx11_abi")
# Facts of the machine: what it is, and the power policy it ran under.
MACHINE_TEXT = ("machine_id", "cpu_model", "cpu_governor", "cpu_epp", "cpu_boost", "cpu_freq_range_mhz", "gpu_policy")
# Options of the run that change a row's time: a row is only judged against a row measured with the same ones.
OPTION_TEXT = ("cpu_allocator", "thp", "timer")
# Per row: its measurements, and the text a reader needs.
ROW_NUMBERS = (
    "n",
    "min_us",
    "median_us",
    "p90_us",
    "p99_us",
    "mean_us",
    "std_us",
    "iqr_us",
    "rounds",
    "setup_s",
    "bytes_moved",
    "gbps",
    "copy_gbps",
    "copy_share",
    "speedup_vs_unfused",
    "vs_launch_floor",
    "other_cpu_share",
    "page_fault_share",
    "threads",
)
ROW_TEXT = ("copy_limit", "note")
STORE_COLUMNS = (*KEY_COLUMNS, *ROW_NUMBERS, *ROW_TEXT, *RUN_TEXT, *MACHINE_TEXT, *OPTION_TEXT)
INTEGER_COLUMNS = ("n", "rounds", "threads")


class MigrationError(ValueError):
    """A report the store cannot take (the message says why)."""


Row = dict[str, object]  # one CSV row: column -> cell (text as read; numbers once migrated)


def _from_4(rows: list[Row]) -> list[Row]:
    added = ("machine_id", "cpu_governor", "cpu_epp", "cpu_boost", "cpu_freq_range_mhz", "cpu_cur_mhz", "gpu_policy")
    return [{**{c: NOT_RECORDED for c in added}, **row} for row in rows]


def _from_5(rows: list[Row]) -> list[Row]:
    # Version 6 added the hardware facts that tell machines apart; its machine_id hashes them, so the id alone
    # keeps machines apart in the store, and the facts themselves stay in the report.
    return [{**{c: NOT_RECORDED for c in HARDWARE_COLUMNS}, **row} for row in rows]


def _from_6(rows: list[Row]) -> list[Row]:
    return [{**row, "layout": earlier_layout(row["workload"], row["baseline"], row["device"])} for row in rows]


# version -> the step to version + 1
_STEPS: dict[int, Callable[[list[Row]], list[Row]]] = {4: _from_4, 5: _from_5, 6: _from_6}
READABLE = (*sorted(_STEPS), CURRENT)


def migrate(rows: list[Row], version: int) -> list[Row]:
    """A report's rows of schema ``version`` (text cells, as the CSV holds them) as the store's columns, numbers
    parsed and checked; MigrationError if the report cannot be taken.

    Plain dicts rather than a DataFrame: a report has a few dozen rows, and a
    frame's per-column operations would cost more than the whole ingest of it.
    """
    if version not in READABLE:
        raise MigrationError(f"schema version {version}: the history reads versions {', '.join(map(str, READABLE))}")
    while version != CURRENT:
        rows, version = _STEPS[version](rows), version + 1
    if not rows:
        raise MigrationError("no rows")
    missing = [c for c in STORE_COLUMNS if c not in rows[0]]
    if missing:
        raise MigrationError(f"schema {CURRENT} columns missing: {', '.join(missing)}")
    migrated = [_row(row) for row in rows]
    _check(migrated)
    return migrated


def _number(text) -> float:
    try:
        return float(text) if text not in (None, "") else math.nan
    except ValueError:
        return math.nan


def _row(row: Row) -> Row:
    out = {c: ("" if row[c] is None else str(row[c])) for c in STORE_COLUMNS if c not in ROW_NUMBERS}
    out.update({c: _number(row[c]) for c in ROW_NUMBERS})
    return out


def _check(rows: list[Row]) -> None:
    keys = set()
    for row in rows:
        for column in KEY_COLUMNS:
            if not row[column]:
                raise MigrationError(f"a row has no {column}")
        if not row["median_us"] > 0:  # NaN fails too
            raise MigrationError("median_us must be a positive number in every row")
        for column in INTEGER_COLUMNS:
            value = row[column]
            if math.isnan(value) or value != int(value):
                raise MigrationError(f"{column} must be an integer in every row")
        key = tuple(row[c] for c in KEY_COLUMNS)
        if key in keys:
            raise MigrationError(f"more than one row for key {list(key)}")
        keys.add(key)
    for column in ("timestamp_utc", "git_commit"):
        values = {row[column] for row in rows}
        if len(values) != 1 or "" in values:
            raise MigrationError(f"{column} must hold one value for the whole report")
    try:
        dt.datetime.strptime(rows[0]["timestamp_utc"], TIME_FORMAT)
    except ValueError as error:
        raise MigrationError(f"timestamp_utc must be a UTC time like 20261204T120531Z: {error}") from error
