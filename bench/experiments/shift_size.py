"""How often the history's level-shift search names a shift in series of identical code, by the smallest size kept.

    python -m bench.experiments.shift_size [--series 1000] [--points 14] [--out reports/history]

Each series is ``--points`` medians of one row with log-normal run-to-run
noise at 2, 3 and 5 % (the spread of committed reports' medians on these
machines) and no change at all; a series with any change named at the given
minimum size is a false alarm. The verdicts' practical threshold (3 %) and the
history's MIN_SHIFT are both among the sizes. Writes ``shift_size.csv``: per
noise and minimum size, the series and how many named a shift.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from bench.history.changepoints import MIN_SHIFT, find_changes
from bench.stats.verdicts import DEFAULT_THRESHOLD
from env.paths import reports_dir

NOISES = (0.02, 0.03, 0.05)


def false_alarms(series: int, points: int, noise: float, min_shift: float, seed: int = 0) -> int:
    """Series of identical code (log-normal noise, no change) in which a shift of ``min_shift`` or more is named."""
    rng = np.random.default_rng(seed)
    return sum(bool(find_changes(100 * np.exp(rng.normal(0, noise, points)), min_shift)) for _ in range(series))


def measure(series: int, points: int, sizes: tuple[float, ...]) -> pd.DataFrame:
    lines = [
        {
            "noise": noise,
            "min_shift": size,
            "series": series,
            "points": points,
            "false_alarms": false_alarms(series, points, noise, size),
        }
        for noise in NOISES
        for size in sizes
    ]
    return pd.DataFrame(lines).assign(rate=lambda f: f.false_alarms / f.series)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--points", type=int, default=14)
    parser.add_argument("--out", type=Path, default=reports_dir() / "history")
    args = parser.parse_args(argv)
    if args.series < 1 or args.points < 2:
        parser.error("--series must be >= 1 and --points >= 2")
    frame = measure(args.series, args.points, tuple(sorted({DEFAULT_THRESHOLD, 0.05, MIN_SHIFT})))
    args.out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out / "shift_size.csv", index=False, float_format="%.4f")
    print(frame.to_string(index=False))


if __name__ == "__main__":
    main()
