"""How many calls a variant needs before its calls take their settled time: the warm-up a run must make.

    python -m bench.experiments.warmup_curve [--shapes 16x256x2048,32x512x4096] [--threads 2]
                                             [--calls 24] [--process 0] [--out DIR]

Plans the jobs of a full run at the given shapes, as one worker process would
(its page offset, its allocator policy), and for every variant: prepares it,
makes the one call a run verifies, then times ``--calls`` calls one by one,
with nothing in between. A call's ``ratio`` is its time over the median of the
last half of the calls (the settled time). The question is whether the first
calls after the verified one run slower than the settled time, and for how
many calls: that bounds the warm-up a run needs, especially where one call
takes 10-500 ms and every warm-up call is a sample not taken.

Written under --out: ``warmup_curve.csv`` (per variant and call: ``call``,
``us``, ``ratio``) and ``warmup_curve.md`` (per variant: the first three calls'
ratios and the first call from which every call stays within TOLERANCE).
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Sequence
from pathlib import Path

TOLERANCE = 0.05  # a call within 5 % of the settled time is settled (the steady-state rule's tolerance)


def curve(call, calls: int) -> list[float]:
    """Microseconds of ``calls`` consecutive calls, each timed alone."""
    times = []
    for _ in range(calls):
        began = time.perf_counter_ns()
        call()
        times.append((time.perf_counter_ns() - began) / 1e3)
    return times


def settled_from(ratios: Sequence[float], tolerance: float = TOLERANCE) -> int:
    """The first call (1-based) from which every later call is within ``tolerance`` of the settled time."""
    first = len(ratios) + 1
    for index in range(len(ratios), 0, -1):
        if abs(ratios[index - 1] - 1.0) > tolerance:
            break
        first = index
    return first


def run(options, page_offset: int, calls: int) -> list[dict]:
    import tempfile

    import numpy as np
    import torch

    from bench.ab.driver import per_process
    from bench.measure.placement import set_page_offset
    from bench.plan.jobs import plan_jobs
    from bench.plan.options import default_threads
    from bench.plan.registry import Prepared
    from bench.run import FULL_RUN_PROCESSES

    options = per_process(options, FULL_RUN_PROCESSES)
    set_page_offset(page_offset)
    torch.set_num_threads(options.threads or default_threads())
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="warmup-curve-") as tmp:
        for job in plan_jobs(options, Path(tmp)):
            if job.label.startswith("limit"):
                continue
            for _case, baseline, variant in job.measurements():
                prepared = variant.prepare()
                call = prepared.call if isinstance(prepared, Prepared) else prepared
                call()  # the verified call a run makes first
                gc.collect()
                gc.disable()
                try:
                    times = curve(call, calls)
                finally:
                    gc.enable()
                settled = float(np.median(times[calls // 2 :]))
                label = f"{job.label} {baseline}/{variant.name}"
                for index, us in enumerate(times, start=1):
                    rows.append({"variant": label, "call": index, "us": us, "ratio": us / settled})
                firsts = " ".join(f"{t / settled:.2f}" for t in times[:4])
                print(f"{settled / 1e3:9.2f} ms  {label}: first calls {firsts}")
            gc.collect()
    return rows


def report(rows: list[dict], out: Path) -> str:
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows)
    frame.to_csv(out / "warmup_curve.csv", index=False)
    lines = [
        "| variant | settled ms | call 1 | call 2 | call 3 | settled from call |",
        "|---|---|---|---|---|---|",
    ]
    for label, group in frame.groupby("variant", sort=False):
        ratios = group.sort_values("call")["ratio"].tolist()
        settled_ms = group["us"].iloc[len(group) // 2 :].median() / 1e3
        lines.append(
            f"| {label} | {settled_ms:.2f} | {ratios[0]:.2f} | {ratios[1]:.2f} | {ratios[2]:.2f} | "
            f"{settled_from(ratios)} |"
        )
    text = "\n".join(lines)
    (out / "warmup_curve.md").write_text(text + "\n")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="16x256x2048,32x512x4096", help="op shapes (comma list)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=24)
    parser.add_argument("--process", type=int, default=0, help="which process of the full run (its page offset)")
    parser.add_argument("--out", type=Path, default=Path("reports/mainjob/warmup_curve"))
    args = parser.parse_args(argv)
    if args.calls < 6:
        parser.error("--calls must be >= 6 (the settled time is the median of the last half)")
    from bench.measure.allocator import DEFAULT, set_malloc_policy

    set_malloc_policy(DEFAULT)  # before torch allocates, as a worker does
    from bench.measure.placement import spread_offsets
    from bench.plan.grid import parse_shape
    from bench.plan.options import BenchOptions
    from bench.run import FULL_RUN_PROCESSES

    shapes = tuple(parse_shape(s) for s in args.shapes.split(",") if s.strip())
    options = BenchOptions(threads=args.threads, op_shapes=shapes, add_norm_shapes=shapes, model_batches=())
    rows = run(options, spread_offsets(FULL_RUN_PROCESSES)[args.process], args.calls)
    print(report(rows, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
