"""How the op's time depends on where its output starts relative to its input within a 4 KiB page.

    invoke bench.offset-sweep [--shape 8x128x1024] [--dtype float32] [--threads 1] [--reps 31] [--out DIR]

A load and an earlier store whose addresses agree in their low 12 bits can be
taken for a dependency by the CPU's store-to-load forwarding (4 KiB aliasing).
The op reads x and writes y, so its speed can depend on the distance between
the two modulo a page, which the allocator, not the code, decides: two fresh
tensors of one large size usually start at the same offset into a page.

x starts at a page boundary; for each distance d, y starts d bytes into a page.
In one process, each repetition visits every distance (in a rotated order)
and times a block of copies of x into y (the physical limit at that layout),
then a block of ``fused_norm_out`` calls into the same y. Per distance: the
median time per element of each, and the median over repetitions of
copy / op, the op's share of the copy read side by side. Written to
``offset_sweep.csv`` and ``offset_sweep.md`` under --out.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd
import torch
from rich.console import Console

import ops
from bench.experiments.defaults import OFFSET_SWEEP
from bench.experiments.sweep_timing import block_us, calls_per_block
from bench.measure.placement import PAGE_BYTES, empty_at
from bench.measure.verify import verify
from bench.plan.grid import CACHE_RESIDENT, parse_shape, shape_label
from env.files import write_text_atomic
from env.paths import reports_dir
from ops.dtypes import dtype_name, parse_dtypes
from ops.reference import EPS, make_inputs, reference_norm, tolerance

DEFAULT_SHAPE = shape_label(CACHE_RESIDENT)  # 4 MiB of float32, where the layout shows most
DEFAULT_DISTANCES = (0, 64, 128, 192, 256, 512, 1024, 2048, 3072, 3968, 4032)


def parse_distances(spec: str, itemsize: int) -> list[int]:
    """A comma list of byte distances, each a multiple of the element size in [0, 4096)."""
    try:
        distances = [int(s) for s in spec.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--distances must be a comma list of integers, got {spec!r}") from None
    bad = [d for d in distances if not (0 <= d < PAGE_BYTES and d % itemsize == 0)]
    if bad or not distances:
        raise ValueError(
            f"--distances must be multiples of the element size ({itemsize} bytes) in [0, {PAGE_BYTES}), got {spec!r}"
        )
    return distances


def sweep(shape: tuple[int, ...], dtype: torch.dtype, distances: Sequence[int], reps: int) -> pd.DataFrame:
    """One row per distance: copy and op time per element, and the op's share of the copy (see module doc)."""
    if reps < 1:
        raise ValueError(f"--reps must be an integer >= 1, got {reps}")
    source, weight, bias = make_inputs(shape, dtype, seed=0)
    x = empty_at(shape, dtype, 0)
    x.copy_(source)
    expected = reference_norm(x, weight, bias, EPS)
    outputs = {d: empty_at(shape, dtype, d) for d in distances}
    for d, y in outputs.items():
        # Every element written, and right, at every layout before any is timed.
        y.fill_(float("nan"))
        ops.fused_norm_out(x, weight, bias, EPS, out=y)
        verify(y, expected, tolerance(dtype), f"fused_norm_out with y {d} bytes after x")

    def copy_into(y: torch.Tensor) -> Callable[[], object]:
        return lambda: y.copy_(x)

    op = torch.ops.myops.fused_norm_out.default  # the call users make, without the Python wrapper's frame

    def op_into(y: torch.Tensor) -> Callable[[], object]:
        return lambda: op(x, weight, bias, EPS, y)

    calls = calls_per_block(op_into(outputs[distances[0]]), 10)
    for y in outputs.values():  # warm-up: every layout once, both callables
        block_us(copy_into(y), calls)
        block_us(op_into(y), calls)

    copy_us: dict[int, list[float]] = {d: [] for d in distances}
    op_us: dict[int, list[float]] = {d: [] for d in distances}
    for rep in range(reps):
        shift = rep % len(distances)  # rotate so that no distance always follows the same one
        for d in list(distances[shift:]) + list(distances[:shift]):
            copy_us[d].append(block_us(copy_into(outputs[d]), calls))
            op_us[d].append(block_us(op_into(outputs[d]), calls))

    numel = x.numel()
    rows = []
    for d in distances:
        rows.append(
            {
                "shape": shape_label(shape),
                "dtype": dtype_name(dtype),
                "threads": torch.get_num_threads(),
                "distance_bytes": d,
                "measured_distance_bytes": (outputs[d].data_ptr() - x.data_ptr()) % PAGE_BYTES,
                "copy_ns_per_element": statistics.median(copy_us[d]) * 1e3 / numel,
                "op_ns_per_element": statistics.median(op_us[d]) * 1e3 / numel,
                "op_share_of_copy": statistics.median(c / o for c, o in zip(copy_us[d], op_us[d], strict=True)),
                "reps": reps,
                "calls_per_block": calls,
            }
        )
    return pd.DataFrame(rows)


def markdown(frame: pd.DataFrame) -> str:
    lines = [
        "| shape | dtype | threads | y - x (bytes mod 4096) | copy ns/element | op ns/element | op share of copy |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in frame.itertuples():
        lines.append(
            f"| {r.shape} | {r.dtype} | {r.threads} | {r.distance_bytes} | {r.copy_ns_per_element:.3f} | "
            f"{r.op_ns_per_element:.3f} | {100 * r.op_share_of_copy:.0f} % |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.offset-sweep", description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default=DEFAULT_SHAPE)
    parser.add_argument("--dtype", default=OFFSET_SWEEP["dtype"])
    parser.add_argument("--distances", default=",".join(map(str, DEFAULT_DISTANCES)))
    parser.add_argument("--threads", type=int, default=OFFSET_SWEEP["threads"])
    parser.add_argument("--reps", type=int, default=OFFSET_SWEEP["reps"])
    parser.add_argument("--out", type=Path, default=reports_dir() / "offset_sweep")
    args = parser.parse_args(argv)
    shape = parse_shape(args.shape)
    dtypes = parse_dtypes(args.dtype)
    if args.threads < 1:
        raise ValueError(f"--threads must be an integer >= 1, got {args.threads}")
    torch.set_num_threads(args.threads)
    frames = []
    for dt in dtypes:
        itemsize = torch.empty(0, dtype=dt.torch).element_size()
        frames.append(sweep(shape, dt.torch, parse_distances(args.distances, itemsize), args.reps))
    frame = pd.concat(frames, ignore_index=True)
    args.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out / "offset_sweep.csv", frame.to_csv(index=False))
    table = markdown(frame)
    write_text_atomic(args.out / "offset_sweep.md", table)
    Console().print(table, highlight=False)


if __name__ == "__main__":
    main()
