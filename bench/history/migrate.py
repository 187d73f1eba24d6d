"""Every report schema the history reads, brought to the store's columns by one function: ``migrate``.

A report CSV carries its ``schema_version`` in every row. Version 4 lacks the
machine id and the power-policy columns that version 5 added; a step fills
them with NOT_RECORDED, so a version-4 report joins the history without
pretending to know them. A new version adds one step here (``_STEPS``) and,
where it renames or adds columns the store keeps, an entry in the lists below.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from bench.history.sources import KEY_COLUMNS

NOT_RECORDED = "not recorded"
CURRENT = 5  # the version every step leads to

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


def _from_4(frame: pd.DataFrame) -> pd.DataFrame:
    added = ("machine_id", "cpu_governor", "cpu_epp", "cpu_boost", "cpu_freq_range_mhz", "cpu_cur_mhz", "gpu_policy")
    return frame.assign(**{c: NOT_RECORDED for c in added if c not in frame.columns})


# version -> the step to version + 1
_STEPS: dict[int, Callable[[pd.DataFrame], pd.DataFrame]] = {4: _from_4}
READABLE = (*sorted(_STEPS), CURRENT)


def migrate(frame: pd.DataFrame, version: int) -> pd.DataFrame:
    """A report's rows of schema ``version`` as the store's columns (STORE_COLUMNS), checked; MigrationError if not."""
    if version not in READABLE:
        raise MigrationError(f"schema version {version}: the history reads versions {', '.join(map(str, READABLE))}")
    while version != CURRENT:
        frame, version = _STEPS[version](frame), version + 1
    missing = [c for c in STORE_COLUMNS if c not in frame.columns]
    if missing:
        raise MigrationError(f"schema {CURRENT} columns missing: {', '.join(missing)}")
    frame = frame[list(STORE_COLUMNS)].copy()
    for column in ROW_NUMBERS:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    for column in (*KEY_COLUMNS, *ROW_TEXT, *RUN_TEXT, *MACHINE_TEXT, *OPTION_TEXT):
        frame[column] = frame[column].astype("string").fillna("")
    _check(frame)
    for column in INTEGER_COLUMNS:
        frame[column] = frame[column].astype("int64")
    return frame


def _check(frame: pd.DataFrame) -> None:
    if frame.empty:
        raise MigrationError("no rows")
    for column in KEY_COLUMNS:
        if (frame[column] == "").any():
            raise MigrationError(f"a row has no {column}")
    medians = frame["median_us"]
    if medians.isna().any() or (medians <= 0).any():
        raise MigrationError("median_us must be a positive number in every row")
    for column in INTEGER_COLUMNS:
        if frame[column].isna().any():
            raise MigrationError(f"{column} must be an integer in every row")
    duplicated = frame.duplicated(list(KEY_COLUMNS))
    if duplicated.any():
        raise MigrationError(f"more than one row for key {frame.loc[duplicated, list(KEY_COLUMNS)].iloc[0].tolist()}")
    for column in ("timestamp_utc", "git_commit"):
        if frame[column].nunique() != 1 or (frame[column] == "").any():
            raise MigrationError(f"{column} must hold one value for the whole report")
