"""Why two-thread rows read one of two levels per process: the host's placement of the two vCPUs, read three ways.

    python -m bench.experiments.core_placement [--rounds 40] [--out reports/power_curves/core_placement]

Separate reports of one commit disagreed by 1.2-1.8x only on rows whose calls
run on both vCPUs, while every thread of every process could use both CPUs
and each process's two threads ran on different CPUs. This process, at two
torch threads, alternates for ``--rounds`` rounds:
  * ``core_pingpong`` (core_pingpong.cpp): the round trip of one cache line
    between CPU 0 and CPU 1, 5 windows of 200000 trips (a physical reading of
    how far apart the vCPUs sit);
  * the product's probe, bench/measure/core_sync.py (a two-thread torch add);
  * the small model's forward with fused norms at 1x32 (a benchmark row that
    read two levels), the median of 100 calls.
Writes ``rounds.csv`` (one line per round) and ``placements.csv`` (per
placement the round trip reads, the probe's and the model's medians and
ranges, and ``probe_called_far``: the share of its rounds the comparison's
rule calls far from the probe alone): if the placement decides the model's
level, the probe can tell a report which placement a row ran on.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from pathlib import Path

import pandas as pd
import torch

from bench.measure import core_sync
from bench.stats.placement import FAR_BOUND
from env.builder.toolchain import cxx_compiler
from env.paths import REPO_ROOT, reports_dir

# Round trips on the development VM read 51-98 ns on one placement and 300-415 ns on the other.
FAR_ROUND_TRIP_NS = 150.0
MODEL_CALLS = 100


def build_tool(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "core_pingpong"
    source = REPO_ROOT / "bench" / "experiments" / "core_pingpong.cpp"
    subprocess.run([cxx_compiler(), "-std=c++17", "-O2", "-pthread", str(source), "-o", str(exe)], check=True)
    return exe


def round_trip_ns(tool: Path, windows: int = 5) -> float:
    done = subprocess.run([str(tool), str(windows)], capture_output=True, text=True, check=True)
    return statistics.median(float(v) for v in done.stdout.split())


def model_call():
    from bench.plan.workloads import ModelCase

    case = ModelCase.create("small", 1, 32, torch.float32, REPO_ROOT / "build" / "core_placement")
    return case.forward_call("fused")


def median_us(call, calls: int) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1e3


def measure(rounds: int, tool: Path) -> pd.DataFrame:
    import ops  # noqa: F401  (registers the fused op the model calls)

    torch.set_num_threads(2)
    call = model_call()
    lines = []
    with torch.no_grad():
        for _ in range(20):
            call()
        for index in range(rounds):
            lines.append(
                {
                    "round": index,
                    "round_trip_ns": round_trip_ns(tool),
                    "probe_us": core_sync.sync_probe_us(),
                    "model_us": median_us(call, MODEL_CALLS),
                }
            )
    return pd.DataFrame(lines)


def by_placement(rounds: pd.DataFrame) -> pd.DataFrame:
    """Per placement (read from the round trip): the readings, and how often the product's rule
    (bench/stats/placement.py: far past FAR_BOUND x the lowest reading) calls the probe's reading far."""
    placement = rounds.round_trip_ns.gt(FAR_ROUND_TRIP_NS).map({False: "near", True: "far"})
    probe_far = rounds.probe_us > FAR_BOUND * rounds.probe_us.min()
    return (
        rounds.assign(placement=placement, probe_far=probe_far)
        .groupby("placement")
        .agg(
            rounds=("round", "size"),
            round_trip_ns_median=("round_trip_ns", "median"),
            probe_us_median=("probe_us", "median"),
            probe_us_min=("probe_us", "min"),
            probe_us_max=("probe_us", "max"),
            model_us_median=("model_us", "median"),
            model_us_min=("model_us", "min"),
            model_us_max=("model_us", "max"),
            probe_called_far=("probe_far", "mean"),
        )
        .reset_index()
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--out", type=Path, default=reports_dir() / "power_curves" / "core_placement")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    tool = build_tool(REPO_ROOT / "build" / "core_placement")
    rounds = measure(args.rounds, tool)
    args.out.mkdir(parents=True, exist_ok=True)
    rounds.to_csv(args.out / "rounds.csv", index=False)
    summary = by_placement(rounds)
    summary.to_csv(args.out / "placements.csv", index=False)
    print(summary.to_string(index=False))


if __name__ == "__main__":
    main()
