"""What a smaller sample floor per process would do to the rows whose calls are long, read from reports.

    python -m bench.experiments.sample_floor REPORT.csv [REPORT.csv ...] [--floors 3,4,5] [--out DIR]

A row whose one call outlasts the round's budget stops at the sample floor
(MIN_SAMPLES over the rounds: 7 a process), so at 32x512x4096 every allocating
variant costs 7 calls of 0.1-0.7 s in each process. For each such row of the
given reports (every round at the floor), this keeps only the first k samples
of each round, as a run with a floor of k would have taken them, and recomputes
the 95 % interval of the median the report gives (bench/measure/precision.py).
It reports, per floor, the half-widths' median and 90th percentile, and how far
the median moves from the full row's.

Written under --out: ``sample_floor.csv`` (per report, row and floor:
``half_width``, ``median_ratio``) and ``sample_floor.md`` (per floor).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path


def rows_at_floor(samples: dict, floor: int) -> dict:
    """The rows whose every round took exactly ``floor`` samples: the rows the floor, not the budget, ended."""
    import numpy as np

    kept = {}
    for key, row in samples.items():
        rounds = np.asarray(row.rounds)
        counts = np.unique(rounds, return_counts=True)[1]
        if len(counts) > 1 and (counts == floor).all():
            kept[key] = row
    return kept


def first_per_round(values, rounds, k: int):
    import numpy as np

    values, rounds = np.asarray(values), np.asarray(rounds)
    return np.concatenate([values[rounds == r][:k] for r in np.unique(rounds)])


def measure(reports: Sequence[Path], floors: Sequence[int], old_floor: int) -> list[dict]:
    import numpy as np

    from bench.measure.precision import median_interval
    from bench.report.schema import read_samples

    out = []
    for report in reports:
        for key, row in rows_at_floor(read_samples(report), old_floor).items():
            full_median = float(np.median(row.values))
            for k in (*floors, old_floor):
                kept = first_per_round(row.values, row.rounds, k)
                low, high = median_interval(kept)
                median = float(np.median(kept))
                out.append(
                    {
                        "report": report.name,
                        "row": " ".join(str(part) for part in key),
                        "floor": k,
                        "median_ms": median / 1e3,
                        "half_width": (high - low) / 2 / median,
                        "median_ratio": median / full_median,
                    }
                )
    return out


def report(rows: list[dict], out: Path) -> str:
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows)
    frame.to_csv(out / "sample_floor.csv", index=False)
    lines = [
        "| samples a process | rows | half-width median | 90th pct | median moved: median | 90th pct |",
        "|---|---|---|---|---|---|",
    ]
    for floor, group in frame.groupby("floor"):
        moved = (group["median_ratio"] - 1).abs()
        lines.append(
            f"| {floor} | {len(group)} | {group['half_width'].median():.2%} | "
            f"{group['half_width'].quantile(0.9):.2%} | {moved.median():.2%} | {moved.quantile(0.9):.2%} |"
        )
    text = "\n".join(lines)
    (out / "sample_floor.md").write_text(text + "\n")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--floors", default="3,4,5", help="samples a process to try (comma list)")
    parser.add_argument("--old-floor", type=int, default=7, help="the floor the reports were taken with, a process")
    parser.add_argument("--out", type=Path, default=Path("reports/mainjob/sample_floor"))
    args = parser.parse_args(argv)
    floors = [int(f) for f in args.floors.split(",") if f.strip()]
    if not floors or min(floors) < 1 or max(floors) >= args.old_floor:
        parser.error(f"--floors must be between 1 and {args.old_floor - 1}")
    print(report(measure(args.reports, floors, args.old_floor), args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
