"""The op at several intra-op thread counts on the same buffers, side by side in one process.

    invoke bench.thread-sweep [--shapes 1x8x512,...] [--threads 1,2] [--reps 21] [--out DIR]

Two runs of ``invoke bench`` at different ``--threads`` compare processes as
well as thread counts: below one task (cpu_rows_per_task, 32768 elements) the
op runs on the calling thread at any count, yet separate runs of that same
code differ by up to 1.8x at 1x8x512 with where each process's buffers lie.
Here every thread count times the same x, weight, bias and output, so the
ratio measures the threads alone.

Per shape, each repetition visits every thread count (in a rotated order) and
times a block of ``fused_norm_out`` calls into one preallocated output, then a
block of allocating ``fused_norm`` calls. The first count is the reference:
per count and variant, the median time per call and the median over
repetitions of (this count's time / the reference's), with its quartiles.
The calling thread is pinned as ``invoke bench`` pins it at that count (one
thread: pinned; more: unpinned), and every block starts on the same CPU,
since the two CPUs of a VM need not run at one speed.
Written to ``thread_sweep.csv`` and ``thread_sweep.md`` under --out.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from rich.console import Console

from bench.experiments.defaults import THREAD_SWEEP
from bench.experiments.sweep_timing import block_us, calls_per_block
from bench.measure.pinning import move_to_timing_cpu, pinned_for_timing
from bench.measure.verify import verify
from bench.plan.grid import THREAD_SWEEP_SHAPES, parse_shape, shape_label
from env.files import write_text_atomic
from env.paths import reports_dir
from ops.reference import EPS, make_inputs, reference_norm, tolerance

# The op shapes of the report, and the task threshold's neighbours: one task
# (32768 elements), two and four tasks.
DEFAULT_SHAPES = tuple(shape_label(s) for s in THREAD_SWEEP_SHAPES)
WARM_CALLS = 3  # untimed calls after a change of thread count: the pool wakes, the caches refill


def parse_threads(spec: str) -> list[int]:
    """A comma list of distinct thread counts >= 1, the first being the reference."""
    try:
        counts = [int(s) for s in spec.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--threads must be a comma list of integers >= 1, got {spec!r}") from None
    if len(counts) < 2 or min(counts) < 1 or len(set(counts)) != len(counts):
        raise ValueError(f"--threads must be at least two distinct integers >= 1, got {spec!r}")
    return counts


def sweep(
    shape: tuple[int, ...], threads: Sequence[int], reps: int, dtype: torch.dtype = torch.float32
) -> pd.DataFrame:
    """One row per thread count and variant (out, call); see the module doc."""
    if reps < 1:
        raise ValueError(f"--reps must be an integer >= 1, got {reps}")
    x, weight, bias = make_inputs(shape, dtype, seed=0)
    expected = reference_norm(x, weight, bias, EPS)
    y = torch.empty_like(x)
    op_out = torch.ops.myops.fused_norm_out.default  # the calls users make, without a Python frame
    op_call = torch.ops.myops.fused_norm.default
    variants = {"out": lambda: op_out(x, weight, bias, EPS, y), "call": lambda: op_call(x, weight, bias, EPS)}
    before = torch.get_num_threads()
    try:
        for n in threads:
            # Every element written, and right, at every thread count before any is timed.
            torch.set_num_threads(n)
            y.fill_(float("nan"))
            op_out(x, weight, bias, EPS, y)
            verify(y, expected, tolerance(dtype), f"fused_norm_out at {n} threads")
            verify(op_call(x, weight, bias, EPS), expected, tolerance(dtype), f"fused_norm at {n} threads")
        torch.set_num_threads(threads[0])
        calls = {name: calls_per_block(fn, 5) for name, fn in variants.items()}
        times: dict[tuple[int, str], list[float]] = {(n, v): [] for n in threads for v in variants}
        for rep in range(reps):
            shift = rep % len(threads)  # rotate so that no count always follows the same one
            for n in list(threads[shift:]) + list(threads[:shift]):
                torch.set_num_threads(n)
                move_to_timing_cpu()  # unpinned counts still start where the pinned one runs
                with pinned_for_timing(n):
                    for name, fn in variants.items():
                        block_us(fn, WARM_CALLS)
                        times[n, name].append(block_us(fn, calls[name]))
    finally:
        torch.set_num_threads(before)

    rows = []
    for n in threads:
        for name in variants:
            ratios = np.array(times[n, name]) / np.array(times[threads[0], name])
            rows.append(
                {
                    "shape": shape_label(shape),
                    "elements": x.numel(),
                    "threads": n,
                    "variant": name,
                    "median_us": statistics.median(times[n, name]),
                    "ratio_to_first": float(np.median(ratios)),
                    "ratio_q25": float(np.quantile(ratios, 0.25)),
                    "ratio_q75": float(np.quantile(ratios, 0.75)),
                    "reps": reps,
                    "calls_per_block": calls[name],
                }
            )
    return pd.DataFrame(rows)


def markdown(frame: pd.DataFrame) -> str:
    lines = [
        "| shape | elements | variant | threads | median us | time / first count's (quartiles) |",
        "|---|---|---|---|---|---|",
    ]
    for r in frame.itertuples():
        lines.append(
            f"| {r.shape} | {r.elements} | {r.variant} | {r.threads} | {r.median_us:.2f} | "
            f"{r.ratio_to_first:.3f} [{r.ratio_q25:.3f}, {r.ratio_q75:.3f}] |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.thread-sweep", description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(DEFAULT_SHAPES))
    parser.add_argument("--threads", default=THREAD_SWEEP["threads"])
    parser.add_argument("--reps", type=int, default=THREAD_SWEEP["reps"])
    parser.add_argument("--out", type=Path, default=reports_dir() / "thread_sweep")
    args = parser.parse_args(argv)
    shapes = [parse_shape(s, "--shapes") for s in args.shapes.split(",") if s.strip()]
    if not shapes:
        raise ValueError(f"--shapes must be a comma list of shapes like 8x128x1024, got {args.shapes!r}")
    threads = parse_threads(args.threads)
    frame = pd.concat([sweep(shape, threads, args.reps) for shape in shapes], ignore_index=True)
    args.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out / "thread_sweep.csv", frame.to_csv(index=False))
    table = markdown(frame)
    write_text_atomic(args.out / "thread_sweep.md", table)
    Console().print(table, highlight=False, soft_wrap=True)


if __name__ == "__main__":
    main()
