"""The history's DuckDB tables, and the incremental ingest of report folders into them.

Tables (one fact in one place):
  machines  a machine: its label, id, CPU model and GPUs
  options   the run options a time depends on: threads, allocator, runtimes, power policy, timer
  commits   a commit: its subject and date where the repository has it
  runs      a report: its file, content hash (report_id), time, machine, options, commit, A/B side
  rows      a report's rows: the row key and its measurements
  units     a row's units: the median of each round (what the interval statistics stand on)
  invalid   report files that failed validation, with the reason
A report is keyed by its content hash and ingested once; the database is
rebuildable from the report files at any time (delete it and ingest again).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pandas as pd

from bench.history import commits
from bench.history.labels import Labels, fallback_label
from bench.history.migrate import INTEGER_COLUMNS, ROW_NUMBERS, ROW_TEXT, TIME_FORMAT
from bench.history.reader import InvalidReport, ParsedReport, content_hash, find_csvs, is_report, read_report
from bench.history.sources import KEY_COLUMNS

STORE_VERSION = 2  # bump when the tables change: an older database is rebuilt, never read wrongly
MACHINE_FACTS = ("label", "machine_id", "cpu_model", "gpus")
OPTION_FACTS = (
    "threads",
    "cpu_allocator",
    "thp",
    "timer",
    "torch",
    "onnxruntime",
    "cpu_governor",
    "cpu_epp",
    "cpu_boost",
    "cpu_freq_range_mhz",
    "gpu_policy",
)
RUN_FACTS = ("host", "onnx", "compiler", "cxx11_abi")
_KEYS = ", ".join(f"{c} VARCHAR" for c in KEY_COLUMNS)
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (store_version INTEGER);
CREATE TABLE IF NOT EXISTS machines (machine_key VARCHAR PRIMARY KEY,
    {", ".join(f"{c} VARCHAR" for c in MACHINE_FACTS)});
CREATE TABLE IF NOT EXISTS options (options_key VARCHAR PRIMARY KEY,
    {", ".join(f"{c} VARCHAR" for c in OPTION_FACTS)});
CREATE TABLE IF NOT EXISTS commits (sha VARCHAR PRIMARY KEY, subject VARCHAR, committed_at VARCHAR);
CREATE TABLE IF NOT EXISTS runs (report_id VARCHAR PRIMARY KEY, path VARCHAR, schema_version INTEGER,
    started_at TIMESTAMP, machine_key VARCHAR, options_key VARCHAR, sha VARCHAR, dirty BOOLEAN,
    {", ".join(f"{c} VARCHAR" for c in RUN_FACTS)}, ab_run VARCHAR, ab_side VARCHAR, has_units BOOLEAN);
CREATE TABLE IF NOT EXISTS rows (report_id VARCHAR, {_KEYS},
    {", ".join(f"{c} DOUBLE" for c in ROW_NUMBERS)}, {", ".join(f"{c} VARCHAR" for c in ROW_TEXT)});
CREATE TABLE IF NOT EXISTS units (report_id VARCHAR, {_KEYS}, round INTEGER, unit_us DOUBLE);
CREATE TABLE IF NOT EXISTS invalid (report_id VARCHAR PRIMARY KEY, path VARCHAR, reason VARCHAR);
"""
BATCH = 400  # reports per bulk insert: DuckDB inserts a frame at once far faster than row by row


@dataclass
class IngestResult:
    added: int = 0
    already: int = 0
    not_reports: int = 0
    invalid: list[InvalidReport] = field(default_factory=list)  # every invalid report under the folders


def connect(path: Path | str) -> duckdb.DuckDBPyConnection:
    """Open (creating) the store; a database of another STORE_VERSION is emptied first, to be rebuilt."""
    if str(path) != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(path))
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    version = con.execute("SELECT max(store_version) FROM meta").fetchone()[0] if "meta" in tables else None
    if tables and version != STORE_VERSION:
        for table in tables:
            con.execute(f'DROP TABLE "{table}"')
    con.execute(SCHEMA)
    if con.execute("SELECT count(*) FROM meta").fetchone()[0] == 0:
        con.execute("INSERT INTO meta VALUES (?)", [STORE_VERSION])
    return con


def ingest(con: duckdb.DuckDBPyConnection, roots: Iterable[Path], labels: Labels) -> IngestResult:
    """Every report CSV under ``roots`` not yet in the store (by content hash) read and added."""
    result = IngestResult()
    known = {r[0] for r in con.execute("SELECT report_id FROM runs").fetchall()}
    known_invalid = {r[0]: r for r in con.execute("SELECT report_id, path, reason FROM invalid").fetchall()}
    pending: list[ParsedReport] = []
    for root in roots:
        for path in find_csvs(Path(root)):
            if not is_report(path):
                result.not_reports += 1
                continue
            report_id = content_hash(path)
            if report_id in known:
                result.already += 1
                continue
            if report_id in known_invalid:
                result.invalid.append(InvalidReport(path, report_id, known_invalid[report_id][2]))
                continue
            parsed = read_report(path, report_id)
            if isinstance(parsed, InvalidReport):
                result.invalid.append(parsed)
                con.execute("INSERT INTO invalid VALUES (?, ?, ?)", [report_id, str(path), parsed.reason])
                known_invalid[report_id] = (report_id, str(path), parsed.reason)
                continue
            known.add(report_id)
            pending.append(parsed)
            if len(pending) >= BATCH:
                _insert(con, pending, labels)
                result.added += len(pending)
                pending = []
    if pending:
        _insert(con, pending, labels)
        result.added += len(pending)
    return result


def _key(values: Iterable[str]) -> str:
    return hashlib.sha1("\x1f".join(values).encode()).hexdigest()[:12]


def _one(rows: list[dict], column: str) -> str:
    """A run-level fact: its one value, or the distinct values joined (a report that mixes them says so)."""
    values = {str(row[column]) if column not in INTEGER_COLUMNS else str(int(row[column])) for row in rows}
    return ",".join(sorted(values))


def _insert(con: duckdb.DuckDBPyConnection, reports: list[ParsedReport], labels: Labels) -> None:
    machines, options, runs, rows, units = {}, {}, [], [], []
    for report in reports:
        gpus = sorted({row["device"] for row in report.rows} - {"cpu"})
        cpu_model = _one(report.rows, "cpu_model")
        machine = {
            "label": labels.label_of(report.path) or fallback_label(cpu_model, gpus),
            "machine_id": _one(report.rows, "machine_id"),
            "cpu_model": cpu_model,
            "gpus": ", ".join(gpus),
        }
        machine_key = _key(machine.values())
        machines[machine_key] = machine
        option = {c: _one(report.rows, c) for c in OPTION_FACTS}
        options_key = _key(option.values())
        options[options_key] = option
        sha, dirty = commits.split_commit(_one(report.rows, "git_commit"))
        runs.append(
            {
                "report_id": report.report_id,
                "path": str(report.path),
                "schema_version": report.schema_version,
                "started_at": pd.to_datetime(_one(report.rows, "timestamp_utc"), format=TIME_FORMAT),
                "machine_key": machine_key,
                "options_key": options_key,
                "sha": sha,
                "dirty": dirty,
                **{c: _one(report.rows, c) for c in RUN_FACTS},
                "ab_run": report.ab_run,
                "ab_side": report.ab_side,
                "has_units": bool(report.units),
            }
        )
        rows.extend({"report_id": report.report_id, **row} for row in report.rows)
        units.extend((report.report_id, *unit) for unit in report.units)
    _append(con, "machines", pd.DataFrame([{"machine_key": k, **v} for k, v in machines.items()]), "machine_key")
    _append(con, "options", pd.DataFrame([{"options_key": k, **v} for k, v in options.items()]), "options_key")
    runs_frame = pd.DataFrame(runs)  # timestamps were checked by migrate
    _append(con, "runs", runs_frame, None)
    _append(con, "rows", pd.DataFrame.from_records(rows), None)
    if units:
        _append(
            con,
            "units",
            pd.DataFrame.from_records(units, columns=["report_id", *KEY_COLUMNS, "round", "unit_us"]),
            None,
        )
    _add_commits(con, set(runs_frame["sha"]))


def _append(con: duckdb.DuckDBPyConnection, table: str, frame: pd.DataFrame, unique: str | None) -> None:
    """Insert ``frame`` by column name; with ``unique``, only the keys the table lacks."""
    columns = [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()]
    frame = frame[columns]
    con.register("incoming", frame)
    try:
        where = f" WHERE {unique} NOT IN (SELECT {unique} FROM {table})" if unique else ""
        con.execute(f"INSERT INTO {table} SELECT {', '.join(columns)} FROM incoming{where}")
    finally:
        con.unregister("incoming")


def _add_commits(con: duckdb.DuckDBPyConnection, shas: set[str]) -> None:
    have = {r[0] for r in con.execute("SELECT sha FROM commits").fetchall()}
    new = sorted(shas - have)
    if not new:
        return
    described = commits.describe(new)
    frame = pd.DataFrame(
        [
            {"sha": s, "subject": described.get(s, ("", ""))[0], "committed_at": described.get(s, ("", ""))[1]}
            for s in new
        ]
    )
    _append(con, "commits", frame, "sha")
