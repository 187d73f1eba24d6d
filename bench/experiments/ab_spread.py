"""How far apart two processes of the same build read each row, by how they share the CPU.

    invoke bench.ab-spread [--rounds 4] [--modes sequential,turns-running,turns-stopped]

Two worker processes of this checkout (bench/processes/worker.py) plan the quick grid
with ``--rounds`` rounds; every job of every round runs in both, in one of
three ways (a mode per pair of fresh workers):
  * ``sequential``: one job after the other (how an A/B run measured before
    turns, and how it still measures a REF from before them);
  * ``turns-running``: in turns of bench/measure/turns.py's TURN_S, the waiting worker
    left running;
  * ``turns-stopped``: in turns, the waiting worker stopped (SIGSTOP), as an
    A/B run does.
Per row and mode: the standard deviation over the rounds of the log ratio of
the two workers' medians in the same round (what an A/B run's pairs spread),
and of one worker's medians from round to round (the host's drift). Written
to ``spread.csv`` and ``spread.md`` under --out. docs/comparisons.md quotes
its results.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console

from bench.ab import driver as ab
from bench.experiments.defaults import AB_SPREAD
from bench.plan.options import BenchOptions
from bench.report.schema import read_samples
from bench.stats.compare import LIMIT_WORKLOAD
from env.files import write_text_atomic
from env.paths import REPO_ROOT, reports_dir

MODES = ("sequential", "turns-running", "turns-stopped")
FUSED_ROWS = "fused"  # the op's own rows, shown apart in the summary


def measure_mode(mode: str, rounds: int, folder: Path, console: Console) -> dict[str, Path]:
    """Both workers over every job of every round in ``mode``; each worker's report CSV by label."""
    tree = ab.Tree(REPO_ROOT)
    options = replace(BenchOptions(quick=True), rounds=rounds)
    workers = [ab.Worker(label, tree.root, tree.build, folder / f"{label}.log") for label in ("A", "B")]
    try:
        for worker in workers:
            plan = ab.plan_for(options, worker.ask({"do": "fields"})["options"], worker.label)
            jobs = worker.ask({"do": "plan", "options": plan, "workdir": str(folder / "cache")})["jobs"]
        for round_index in range(rounds):
            for job in range(jobs):
                order = workers if (job + round_index) % 2 == 0 else workers[::-1]
                if mode == "sequential":
                    for worker in order:
                        worker.ask({"do": "job", "round": round_index, "index": job})
                else:
                    ab.run_job_in_turns(order, job, round_index, stop_waiting=mode == "turns-stopped")
            console.print(f"{mode}: round {round_index + 1}/{rounds} measured", highlight=False)
        return {w.label: Path(w.ask({"do": "record", "out_dir": str(folder / w.label)})["csv"]) for w in workers}
    finally:
        for worker in workers:
            worker.close()


def spread(csvs: dict[str, Path], mode: str) -> pd.DataFrame:
    """Per row: SD over rounds of log(A's median / B's median), and of each worker's log median (averaged)."""
    a, b = read_samples(csvs["A"]), read_samples(csvs["B"])
    rows = []
    for key in sorted(set(a) & set(b)):
        if key[0] == LIMIT_WORKLOAD:
            continue
        medians = [np.log(samples.round_medians()) for samples in (a[key], b[key])]
        rows.append(
            {
                "mode": mode,
                "row": " ".join(key[:5]),
                "baseline": key[3],
                "pair_log_ratio_sd": float(np.std(medians[0] - medians[1], ddof=1)),
                "round_to_round_sd": float(np.mean([np.std(m, ddof=1) for m in medians])),
            }
        )
    return pd.DataFrame(rows)


def summary(frame: pd.DataFrame) -> str:
    lines = [
        "| mode | rows | pair log-ratio SD (median) | round-to-round SD (median) | the fused op's rows, pair SD |",
        "|---|---|---|---|---|",
    ]
    for mode, group in frame.groupby("mode", sort=False):
        fused = group[group.baseline == FUSED_ROWS]
        lines.append(
            f"| {mode} | {len(group)} | {group.pair_log_ratio_sd.median():.3f} | "
            f"{group.round_to_round_sd.median():.3f} | "
            + ", ".join(f"{r.row.split()[1]} {r.row.split()[4]} {r.pair_log_ratio_sd:.2f}" for r in fused.itertuples())
            + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.ab-spread", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=AB_SPREAD["rounds"])
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--out", type=Path, default=reports_dir() / "ab_spread")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if unknown := [m for m in modes if m not in MODES]:
        raise ValueError(f"--modes must be a comma list of {', '.join(MODES)}; unknown: {', '.join(unknown)}")
    if args.rounds < 2:
        raise ValueError(f"--rounds must be an integer >= 2 (a spread needs two rounds), got {args.rounds}")
    console = Console()
    frames = [spread(measure_mode(m, args.rounds, args.out / m, console), m) for m in modes]
    frame = pd.concat(frames, ignore_index=True)
    args.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out / "spread.csv", frame.to_csv(index=False))
    table = summary(frame)
    write_text_atomic(args.out / "spread.md", table)
    console.print(table, highlight=False)


if __name__ == "__main__":
    main()
