"""The first step of a run: the ordered list of jobs, device by device, each yielding what to time.

Per device (``--device``, default every device present): the dispatch or launch
floor; then per case (shape x dtype of that device's grid) the copy limit and
every baseline that runs on the device, back to back, so ratios within a case
share the machine's state, a shape's add_norm case right after its op case
(the two share one build of x, weight and bias); then the model-level cases.
No case is built until its first job runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from bench.measure.placement import LAYOUTS, NATURAL
from bench.plan.devices import resolve_devices
from bench.plan.grid import GRIDS, parse_shape, shape_label
from bench.plan.limits import copy_limits, dispatch_floor, launch_floor
from bench.plan.options import BenchOptions
from bench.plan.registry import Baseline, Variant, select
from bench.plan.workloads import AddNormCase, ModelCase, NormInputs, OpCase
from ops.dtypes import dtype_name, parse_dtypes


@dataclass(frozen=True)
class Job:
    """One unit of work: a limit, or one baseline on one case. ``measurements()`` yields what to time."""

    label: str
    measurements: Callable[[], Iterator[tuple[object, str, Variant]]]


class _LazyCase:
    """Builds a case on first use and drops it on release, so big inputs live one case at a time."""

    def __init__(self, make: Callable[[], object]) -> None:
        self._make, self._case = make, None

    def get(self) -> object:
        if self._case is None:
            self._case = self._make()
        return self._case

    def release(self) -> None:
        self._case = None


@dataclass(frozen=True)
class _Selection:
    """Which jobs and rows of the grid a run measures (BenchOptions.jobs and .rows; None: all)."""

    jobs: frozenset[str] | None
    rows: frozenset[str] | None

    @classmethod
    def of(cls, options: BenchOptions) -> _Selection:
        rows = None if options.rows is None else frozenset(options.rows)
        jobs = None if options.jobs is None else frozenset(options.jobs)
        if rows is not None:
            of_rows = frozenset(row.rpartition("/")[0] for row in rows)
            jobs = of_rows if jobs is None else jobs & of_rows
        return cls(jobs, rows)

    @property
    def limits(self) -> bool:
        # A row's ratios to the limits are not what a second look at it is for: it is judged on its own time.
        return self.rows is None

    def job(self, label: str) -> bool:
        return self.jobs is None or label in self.jobs

    def row(self, job: str, variant: str) -> bool:
        return self.rows is None or row_label(job, variant) in self.rows


def row_label(job: str, variant: str) -> str:
    """How BenchOptions.rows names one variant of one job."""
    return f"{job}/{variant}"


def _baseline_job(
    key: JobKey, baseline: Baseline, case: _LazyCase, release: tuple[_LazyCase, ...], selection: _Selection
) -> Job:
    job = key.of(baseline.name).label

    def measurements() -> Iterator[tuple[object, str, Variant]]:
        current = case.get()
        try:
            for variant in baseline.variants(current):
                if selection.row(job, variant.name):
                    yield current, baseline.name, variant
        finally:
            for lazy in release:  # the last job to use them: free their tensors before the next case allocates
                lazy.release()

    return Job(job, measurements)


def _releasing(count: int, last: tuple[_LazyCase, ...]) -> list[tuple[_LazyCase, ...]]:
    """What each of ``count`` jobs releases when it ends: nothing, and ``last`` after the last one."""
    return [last if i == count - 1 else () for i in range(count)]


def device_prefix(device: str) -> str:
    return "" if device == "cpu" else f"{device} "  # the CPU is the default device: its labels carry no prefix


@dataclass(frozen=True)
class JobKey:
    """What one job measures. ``label`` is how BenchOptions.jobs, the worker protocol and the progress line
    name it: a string, so that a tree of another layout reads the same names."""

    workload: str  # op, add_norm or model
    case: str  # the shape's label (op, add_norm), or "<model> <batch>x<sequence>" (model)
    dtype: str
    device: str
    baseline: str = ""  # "": the case's jobs as a group; "copy": its copy limit
    layout: str = NATURAL  # an op case's (bench/measure/placement.py); the others name none

    @property
    def label(self) -> str:
        # The natural layout is the default: only another one is named.
        layout = f" {self.layout}" if self.workload == "op" and self.layout != NATURAL else ""
        text = f"{device_prefix(self.device)}{self.workload} {self.case} {self.dtype}{layout}"
        return f"{text} {self.baseline}" if self.baseline else text

    def of(self, baseline: str) -> JobKey:
        return replace(self, baseline=baseline)

    @classmethod
    def of_row(
        cls, workload: str, shape: str, dtype: str, baseline: str, device: str, layout: str = NATURAL
    ) -> JobKey | None:
        """The job that measures a report row (its key's values); None for a limit row.

        A model row's shape is batch x sequence x hidden; its job names the grid's model of that batch.
        """
        if workload == "op":
            return cls(workload, shape_label(parse_shape(shape, "shape")), dtype, device, baseline, layout)
        if workload == "add_norm":
            return cls(workload, shape_label(parse_shape(shape, "shape")), dtype, device, baseline)
        if workload == "model":
            batch, seq = parse_shape(shape, "shape")[:2]
            grid = GRIDS[device]
            for name, b, s in grid.batches(True) + grid.batches(False):
                if (b, s) == (batch, seq):
                    return cls("model", f"{name} {shape_label((batch, seq))}", dtype, device, baseline)
            raise ValueError(f"no model of the {device} grid runs batch {batch} x sequence {seq}")
        return None


def _op_jobs(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    device: str,
    baselines: list[Baseline],
    workdir: Path,
    selection: _Selection,
    inputs: _LazyCase,
    release: tuple[_LazyCase, ...],
    layout: str = NATURAL,
) -> list[Job]:
    """``inputs``: the shape's NormInputs, shared with its add_norm case; ``release``: freed after the last job."""
    case = _LazyCase(lambda: OpCase.create(shape, dtype, workdir, device=device, inputs=inputs.get(), layout=layout))
    key = JobKey("op", shape_label(shape), dtype_name(dtype), device, layout=layout)
    baselines = [b for b in baselines if selection.job(key.of(b.name).label)]
    copy = selection.limits and (baselines or selection.job(key.of("copy").label))
    jobs = [Job(key.of("copy").label, lambda: iter(copy_limits(case.get())))] if copy else []
    ends = _releasing(len(baselines), (case, *release))
    return jobs + [_baseline_job(key, b, case, end, selection) for b, end in zip(baselines, ends, strict=True)]


def _add_norm_jobs(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    device: str,
    baselines: list[Baseline],
    workdir: Path,
    selection: _Selection,
    inputs: _LazyCase,
) -> list[Job]:
    # No copy job of its own: the op's copy rows at the same shape are its limit too (same bytes per second).
    case = _LazyCase(lambda: AddNormCase.create(shape, dtype, workdir, device=device, inputs=inputs.get()))
    key = JobKey("add_norm", shape_label(shape), dtype_name(dtype), device)
    baselines = [b for b in baselines if selection.job(key.of(b.name).label)]
    ends = _releasing(len(baselines), (case, inputs))
    return [_baseline_job(key, b, case, end, selection) for b, end in zip(baselines, ends, strict=True)]


def _model_jobs(
    name: str,
    batch: int,
    seq: int,
    dtype: torch.dtype,
    device: str,
    baselines: list[Baseline],
    workdir: Path,
    selection: _Selection,
) -> list[Job]:
    case = _LazyCase(lambda: ModelCase.create(name, batch, seq, dtype, workdir, device=device))
    key = JobKey("model", f"{name} {shape_label((batch, seq))}", dtype_name(dtype), device)
    baselines = [b for b in baselines if selection.job(key.of(b.name).label)]
    ends = _releasing(len(baselines), (case,))
    return [_baseline_job(key, b, case, end, selection) for b, end in zip(baselines, ends, strict=True)]


def _shared_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> _LazyCase:
    return _LazyCase(lambda: NormInputs.create(shape, dtype, device=device))


def _floor_job(device: str, workdir: Path) -> Job:
    if device == "cpu":
        return Job("limit dispatch floor", lambda: iter(dispatch_floor(workdir)))
    return Job(f"{device_prefix(device)}limit launch floor", lambda: iter(launch_floor(workdir, device)))


def job_label(workload: str, shape: str, dtype: str, baseline: str, device: str, layout: str = NATURAL) -> str | None:
    """The label of the job that measures a report row (its key's values); None for a limit row."""
    key = JobKey.of_row(workload, shape, dtype, baseline, device, layout)
    return None if key is None else key.label


def device_layouts(device: str, layouts: str = "all") -> tuple[str, ...]:
    """The layouts an op case is measured at (BenchOptions.layouts), the natural first; a GPU's buffers are
    not placed, so a GPU measures the natural layout alone."""
    if layouts not in ("all", *LAYOUTS):
        raise ValueError(f"layouts must be all or one of {LAYOUTS}, got {layouts!r}")
    if device != "cpu":
        return (NATURAL,)
    return LAYOUTS if layouts == "all" else (layouts,)


def plan_jobs(options: BenchOptions, workdir: Path) -> list[Job]:
    """Every job of a run, device by device, in order; no case is built until its first job runs.

    With ``options.jobs``, only those (and the limits: the floors, and the copy of each case that keeps a job);
    with ``options.rows``, only the jobs of those rows, each timing just its rows, and no limits.
    """
    selection = _Selection.of(options)
    jobs = _plan_all_jobs(options, workdir, selection)
    if selection.jobs is not None and (missing := selection.jobs - {job.label for job in jobs}):
        raise ValueError(f"jobs {sorted(missing)} are not in this grid (its options do not plan them)")
    return jobs


def _plan_all_jobs(options: BenchOptions, workdir: Path, selection: _Selection) -> list[Job]:
    baselines = select(options.baseline)
    jobs = []
    for device in resolve_devices(options.device):
        grid = GRIDS[device]
        dtypes = [d.torch for d in parse_dtypes(options.dtype or grid.dtypes)]
        op_shapes, add_norm_shapes = grid.run_shapes(options.quick, options.op_shapes, options.add_norm_shapes)
        batches = options.model_batches if options.model_batches is not None else grid.batches(options.quick)
        here = [b for b in baselines if device in b.devices]
        op_baselines = [b for b in here if "op" in b.workloads]
        add_norm_baselines = [b for b in here if "add_norm" in b.workloads]
        model_baselines = [b for b in here if "model" in b.workloads]
        if selection.limits:
            jobs.append(_floor_job(device, workdir))
        for dtype in dtypes:
            # A shape's add_norm jobs follow its op jobs: the two cases share one build of x, weight and bias.
            add_norm = [tuple(s) for s in add_norm_shapes] if add_norm_baselines else []
            for shape in op_shapes:
                inputs = _shared_inputs(shape, dtype, device)
                after = (
                    _add_norm_jobs(shape, dtype, device, add_norm_baselines, workdir, selection, inputs)
                    if tuple(shape) in add_norm
                    else []
                )
                layouts = device_layouts(device, options.layouts)
                for layout in layouts:
                    # The inputs go with the last job that reads them: the last layout's, unless add_norm follows.
                    release = (inputs,) if layout == layouts[-1] and not after else ()
                    jobs += _op_jobs(shape, dtype, device, op_baselines, workdir, selection, inputs, release, layout)
                jobs += after
            for shape in (s for s in add_norm if s not in {tuple(o) for o in op_shapes}):
                inputs = _shared_inputs(shape, dtype, device)
                jobs += _add_norm_jobs(shape, dtype, device, add_norm_baselines, workdir, selection, inputs)
            for name, batch, seq in batches:
                jobs += _model_jobs(name, batch, seq, dtype, device, model_baselines, workdir, selection)
    return jobs
