"""The store's tables as Parquet, partitioned by machine, for a warehouse or a dataframe library to read as they are.

``DIR/<table>/machine_key=<key>/*.parquet`` (Hive partitioning: readers take
the folder name as a column) for every table with a machine: runs, rows,
units, judgements and machines. Tables of no one machine (options, commits,
invalid) are one file each, ``DIR/<table>.parquet``. DuckDB writes them
itself; the folder is replaced whole, so a reader never mixes two exports.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb

BY_MACHINE = {
    "machines": "SELECT * FROM machines",
    "runs": "SELECT * FROM runs",
    "rows": "SELECT u.machine_key, r.* FROM rows r JOIN runs u USING (report_id)",
    "units": "SELECT u.machine_key, n.* FROM units n JOIN runs u USING (report_id)",
    "judgements": "SELECT u.machine_key, j.* FROM judgements j JOIN runs u USING (report_id)",
}
WHOLE = ("options", "commits", "invalid")


def export_parquet(con: duckdb.DuckDBPyConnection, out: Path) -> list[Path]:
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    written = []
    for name, query in BY_MACHINE.items():
        if name not in tables:
            continue
        target = out / name
        con.execute(f"COPY ({query}) TO '{_quoted(target)}' (FORMAT PARQUET, PARTITION_BY (machine_key))")
        written.append(target)
    for name in WHOLE:
        target = out / f"{name}.parquet"
        con.execute(f"COPY {name} TO '{_quoted(target)}' (FORMAT PARQUET)")
        written.append(target)
    return written


def _quoted(path: Path) -> str:
    """A path inside an SQL string literal."""
    return str(path).replace("'", "''")
