"""Finding report files under folders, and reading one: its rows (migrated), its units, its content hash.

A CSV is a report when its header has ``schema_version`` and the row key;
any other CSV under ``reports/`` (a sweep's table, nvidia-smi's output) is not
one and is passed over, counted. A report that fails to read or to migrate is
returned as an InvalidReport with the reason, never half-ingested.

The units are what the statistics stand on (bench/stats/compare.py): one median per
round of a row. The store keeps them instead of the raw samples: a few per
row instead of thousands, and all a comparison reads.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.history.migrate import MigrationError, migrate
from bench.history.sources import KEY_COLUMNS, SAMPLES_SUFFIX, sample_key

AB_SIDES = ("base", "new")  # `bench --against` writes <folder>/base/pooled.csv and <folder>/new/pooled.csv
AB_FILE = "pooled.csv"


@dataclass(frozen=True)
class ParsedReport:
    path: Path
    report_id: str  # content hash of the CSV and its samples
    rows: list[dict]  # STORE_COLUMNS (migrate.py)
    units: list[tuple]  # (*KEY_COLUMNS, round, unit_us); empty when the report kept no samples
    schema_version: int
    ab_run: str  # the A/B run's folder for a side of one, else ""
    ab_side: str  # "base" | "new" | ""


@dataclass(frozen=True)
class InvalidReport:
    path: Path
    report_id: str
    reason: str


def samples_path(csv_path: Path) -> Path:
    return csv_path.with_name(csv_path.stem + SAMPLES_SUFFIX)


def content_hash(csv_path: Path) -> str:
    """sha256 of the CSV's bytes and its samples' bytes: the same report copied elsewhere is the same report."""
    digest = hashlib.sha256(csv_path.read_bytes())
    samples = samples_path(csv_path)
    if samples.is_file():
        digest.update(samples.read_bytes())
    return digest.hexdigest()[:20]


def is_report(csv_path: Path) -> bool:
    """Whether the header names a report (schema_version and the row key); cheap: reads one line."""
    try:
        with open(csv_path, newline="", encoding="utf-8") as handle:
            header = next(csv.reader(handle), [])
    except (OSError, UnicodeDecodeError):
        return True  # unreadable: let read_report say why, as an invalid report
    # The layout joined the key in schema 7: an earlier report has the rest of it.
    return "schema_version" in header and set(KEY_COLUMNS) - {"layout"} <= set(header)


def find_csvs(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.csv") if p.is_file())


def read_report(csv_path: Path, report_id: str | None = None) -> ParsedReport | InvalidReport:
    report_id = report_id or content_hash(csv_path)
    try:
        with open(csv_path, newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        versions = {row.get("schema_version") for row in rows}
        if len(versions) != 1 or not str(next(iter(versions))).strip().isdigit():
            raise MigrationError(
                f"schema_version must hold one number for the whole report, found {sorted(map(str, versions))}"
            )
        version = int(next(iter(versions)))
        rows = migrate(rows, version)
        units = read_units(csv_path, rows, version)
    except (MigrationError, csv.Error, UnicodeDecodeError, OSError) as error:
        return InvalidReport(csv_path, report_id, str(error))
    except (KeyError, ValueError, TypeError) as error:
        return InvalidReport(csv_path, report_id, f"{type(error).__name__}: {error}")
    side = csv_path.parent.name if csv_path.name == AB_FILE and csv_path.parent.name in AB_SIDES else ""
    return ParsedReport(csv_path, report_id, rows, units, version, str(csv_path.parent.parent) if side else "", side)


def read_units(csv_path: Path, rows: list[dict], version: int) -> list[tuple]:
    """(*key, round, unit_us): the median of each round of each row, from the samples sidecar; [] without one.

    The sidecar's layout is the same in every schema version the history reads
    (keys, counts, samples_us, rounds); a key before schema 7 gains its layout. Rows it lacks simply have no
    units.
    """
    path = samples_path(csv_path)
    if not path.is_file():
        return []
    try:
        with np.load(path, allow_pickle=False) as data:
            keys, counts, flat, rounds = data["keys"], data["counts"], data["samples_us"], data["rounds"]
    except (OSError, KeyError, ValueError) as error:
        raise MigrationError(f"{path.name}: not a samples file ({error})") from error
    if len(flat) != int(np.sum(counts)) or len(rounds) != len(flat):
        raise MigrationError(f"{path.name}: sample counts do not add up")
    known = {tuple(row[c] for c in KEY_COLUMNS) for row in rows}
    bounds = np.concatenate([[0], np.cumsum(counts)])
    units = []
    for i, key in enumerate(keys):
        key = sample_key(key, version)
        if key not in known:
            continue
        values, row_rounds = flat[bounds[i] : bounds[i + 1]], rounds[bounds[i] : bounds[i + 1]]
        for r in np.unique(row_rounds):
            units.append((*key, int(r), float(np.median(values[row_rounds == r]))))
    return units
