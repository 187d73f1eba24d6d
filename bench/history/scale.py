"""How the history scales: ingest, judgement and site generation over synthetic histories of 100 to 10,000 reports.

``python -m bench.history.scale [--sizes 100,1000,10000] [--out reports/history]``
writes scale.csv and scale.md there. Each size is a fresh history
(synthetic.py: 4 machines, the reports spread over their commits, 21 rows
each) written to a temporary folder, ingested into a fresh store, judged and
turned into a site; each step is timed with a wall clock, and the overview's
and the largest row page's sizes are read off the files. The histories carry
no samples, as most committed reports do not, so every judgement reads
"insufficient data" and costs a query; the interval statistics' own cost is
timed apart, on SAMPLED reports with their samples: they cost per row judged,
and the store judges only the rows it has not judged before.
"""

from __future__ import annotations

import argparse
import csv
import os
import tempfile
import time
from pathlib import Path

from bench.history.changepoints import MIN_SHIFT, all_changes
from bench.history.labels import Labels
from bench.history.regressions import judge_history
from bench.history.site.build import build_site
from bench.history.store import connect, ingest
from bench.history.synthetic import History, Machine, write_history
from bench.stats.verdicts import DEFAULT_THRESHOLD as PAIRED_THRESHOLD
from env.paths import reports_dir

MACHINES = tuple(Machine(f"machine {i}", f"id-{i}", f"CPU {i}", scale=1 + 0.2 * i) for i in range(4))
SAMPLED = 100  # reports with samples whose judgement is timed


def measure(size: int, with_samples: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        history = History(MACHINES, commits=size // len(MACHINES), with_samples=with_samples, seed=size)
        started = time.perf_counter()
        write_history(history, tmp / "reports")
        written = time.perf_counter() - started
        con = connect(tmp / "history.duckdb")
        started = time.perf_counter()
        result = ingest(con, [tmp / "reports"], Labels({}))
        ingest_s = time.perf_counter() - started
        started = time.perf_counter()
        judged = judge_history(con)
        judge_s = time.perf_counter() - started
        line = {
            "reports": result.added,
            "samples": "yes" if with_samples else "no",
            "rows": con.execute("SELECT count(*) FROM rows").fetchone()[0],
            "write_s": round(written, 2),
            "ingest_s": round(ingest_s, 2),
            "ingest_ms_per_report": round(1000 * ingest_s / result.added, 2),
            "judged_rows": judged,
            "judge_s": round(judge_s, 2),
        }
        if with_samples:
            return line
        started = time.perf_counter()
        changes = all_changes(con, MIN_SHIFT)
        line["changepoints_s"] = round(time.perf_counter() - started, 2)
        started = time.perf_counter()
        index = build_site(con, tmp / "site", PAIRED_THRESHOLD, changes)
        line["site_s"] = round(time.perf_counter() - started, 2)
        line["overview_bytes"] = index.stat().st_size
        line["largest_row_page_bytes"] = max(p.stat().st_size for p in (tmp / "site" / "rows").glob("*.html"))
        line["site_files"] = sum(1 for _ in (tmp / "site").rglob("*") if _.is_file())
        con.close()
        return line


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--out", type=Path, default=reports_dir() / "history")
    args = parser.parse_args(argv)
    lines = [measure(int(size)) for size in args.sizes.split(",")]
    lines.append(measure(SAMPLED, with_samples=True))
    args.out.mkdir(parents=True, exist_ok=True)
    columns = list(dict.fromkeys(k for line in lines for k in line))
    with open(args.out / "scale.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(lines)
    for line in lines:
        print(line)
    print(f"{os.cpu_count()} CPUs; written {args.out / 'scale.csv'}")


if __name__ == "__main__":
    main()
