"""The named shapes and shape grids of every benchmark, and the one way a shape is written and read.

CPU op shapes span the three regimes of a norm on a CPU:
  * dispatch-bound (16 KiB of float32): the Python/dispatcher cost of each call dominates;
  * cache-resident (4 MiB): x and y fit the last-level cache, compute and its bandwidth count;
  * memory-bound (256 MiB): DRAM bandwidth, and page faults for fresh outputs;
plus two in between for the plot. CUDA shapes span the same regimes on a GPU:
launch-bound, L2-resident, and two HBM-bound ones (64 and 256 MiB in bfloat16,
past any L2), where the fused kernel is held against a device-to-device copy.
Model-level cases run the sequence model of ops/model.py (its default size) at
a small and a medium batch. The targets (bench/report/targets.py) and the
experiments name their shapes from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Shape = tuple[int, ...]

DISPATCH_BOUND: Shape = (1, 8, 512)
MODEL_WIDTH: Shape = (4, 64, 768)
CACHE_RESIDENT: Shape = (8, 128, 1024)
CACHE_EDGE: Shape = (16, 256, 2048)
MEMORY_BOUND: Shape = (32, 512, 4096)
HBM_BOUND: Shape = (4096, 8192)
HBM_BOUND_LARGE: Shape = (16384, 8192)

CPU_SHAPES = (DISPATCH_BOUND, MODEL_WIDTH, CACHE_RESIDENT, CACHE_EDGE, MEMORY_BOUND)
CPU_QUICK_SHAPES = (DISPATCH_BOUND, CACHE_RESIDENT)
CUDA_SHAPES = (DISPATCH_BOUND, CACHE_RESIDENT, MEMORY_BOUND, HBM_BOUND, HBM_BOUND_LARGE)
CUDA_QUICK_SHAPES = (DISPATCH_BOUND, HBM_BOUND)
# The residual add + norm on a GPU: the op's regimes short of the largest (a launch-bound row, model widths,
# and the bandwidth-bound HBM_BOUND).
CUDA_ADD_NORM_SHAPES = (DISPATCH_BOUND, CACHE_RESIDENT, MEMORY_BOUND, HBM_BOUND)
# The CPU op's task threshold (one task of 32768 elements) and its neighbours, two and four tasks, with the
# CPU grid: where the thread count can matter.
THREAD_SWEEP_SHAPES = (DISPATCH_BOUND, (1, 64, 512), (1, 128, 512), (1, 256, 512), *CPU_SHAPES[1:])

MODEL_BATCHES = (("small", 1, 32), ("medium", 8, 128))  # (label, batch, sequence) at the model's default size
MODEL_BATCHES_QUICK = MODEL_BATCHES[:1]


@dataclass(frozen=True)
class Grid:
    """One device's grid: op shapes and model batches (full and --quick), and the dtypes run by default."""

    op_shapes: tuple[Shape, ...]
    op_shapes_quick: tuple[Shape, ...]
    model_batches: tuple[tuple[str, int, int], ...]  # (label, batch, seq) for the model's default size
    model_batches_quick: tuple[tuple[str, int, int], ...]
    dtypes: str  # the --dtype used when none is given
    # The fused residual add + norm, full runs only (a quick run keeps CI's grid): the op shapes where the
    # device has the op's kernel.
    add_norm_shapes: tuple[Shape, ...] = ()

    def shapes(self, quick: bool) -> tuple[Shape, ...]:
        return self.op_shapes_quick if quick else self.op_shapes

    def add_norm(self, quick: bool) -> tuple[Shape, ...]:
        return () if quick else self.add_norm_shapes

    def run_shapes(
        self, quick: bool, op_shapes: tuple[Shape, ...] | None, add_norm_shapes: tuple[Shape, ...] | None
    ) -> tuple[tuple[Shape, ...], tuple[Shape, ...]]:
        """A run's op and add_norm shapes: the options' overrides, else this grid's (no add_norm shapes where only
        the op's are overridden)."""
        op = op_shapes or self.shapes(quick)
        if add_norm_shapes is not None:
            return op, add_norm_shapes
        return op, () if op_shapes else self.add_norm(quick)

    def batches(self, quick: bool) -> tuple[tuple[str, int, int], ...]:
        return self.model_batches_quick if quick else self.model_batches


GRIDS: dict[str, Grid] = {
    "cpu": Grid(
        op_shapes=CPU_SHAPES,
        op_shapes_quick=CPU_QUICK_SHAPES,
        model_batches=MODEL_BATCHES,
        model_batches_quick=MODEL_BATCHES_QUICK,
        dtypes="float32",
        add_norm_shapes=CPU_SHAPES,
    ),
    "cuda": Grid(
        op_shapes=CUDA_SHAPES,
        op_shapes_quick=CUDA_QUICK_SHAPES,
        model_batches=MODEL_BATCHES,
        model_batches_quick=MODEL_BATCHES_QUICK,
        dtypes="float32,bfloat16",  # float32 for the launch floor, bfloat16 as models run on a GPU
        add_norm_shapes=CUDA_ADD_NORM_SHAPES,
    ),
}


def shape_label(shape: Shape) -> str:
    """How reports, job labels and options write a shape: (8, 128, 1024) -> "8x128x1024"."""
    return "x".join(str(d) for d in shape)


def parse_shape(label: str, option: str = "--shape") -> Shape:
    """ "8x128x1024" -> (8, 128, 1024); ValueError naming ``option`` for anything but positive integers joined by x."""
    parts = label.strip().lower().split("x")
    if not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        example = shape_label(CACHE_RESIDENT)
        raise ValueError(f"{option} must be positive integers joined by 'x' (like {example}), got {label!r}")
    return tuple(int(p) for p in parts)


def shape_elements(shape: Shape | str) -> int:
    """Elements of a shape or of its label ("8x128x1024" -> 1048576)."""
    return math.prod(parse_shape(shape, "shape") if isinstance(shape, str) else shape)
