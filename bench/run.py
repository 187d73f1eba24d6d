"""``invoke bench``: measure the limits and every selected baseline, then write the report.

The run is three plain steps, each a public function so other drivers (an A/B
run of two builds) can compose them:
  1. :func:`plan_jobs` - the ordered list of jobs, device by device (``--device``,
     default every device present): the dispatch or launch floor; then per case
     (shape x dtype of that device's grid) the copy limit and every baseline
     that runs on the device, back to back, so ratios within a case share the
     machine's state; then the model-level cases;
  2. :func:`run_round` - one pass over the jobs. Every variant is prepared
     (outside the timed loop), verified against the float64 reference, warmed
     up and timed (bench/timing.py: the host clock on the CPU, CUDA events on
     a GPU); its timing is added to :class:`Results`;
  3. :func:`record_results` - pool each row's rounds, add the ratios and write
     the report (CSV, samples, plot).

The whole grid is passed over ROUNDS times, each round taking 1/ROUNDS of every
variant's time budget (asv's "rounds"): a variant's samples are then spread over
the run, so a stretch of a few seconds in which the machine is slow (other
virtual machines on the host, frequency changes - seen here as 25-60 % for ~20 s)
touches only some of its rounds. `invoke bench.compare` uses the rounds to tell such
a stretch from a real slowdown. Later rounds re-use the first round's setup
(export files, Inductor's cache) and re-warm with REWARM_CALLS calls.
"""

from __future__ import annotations

import gc
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bench import metrics
from bench import turns as bench_turns
from bench.allocator import fix_malloc_policy
from bench.devices import device_label, resolve_devices
from bench.environment import environment_columns, utc_timestamp
from bench.limits import copy_limits, dispatch_floor, launch_floor
from bench.pinning import pinned_for_timing
from bench.registry import Baseline, Prepared, Unsupported, Variant, select
from bench.report import ReportPaths, RowKey, RowSamples, to_frame, write_report
from bench.timing import L2Flush, Timing, TimingConfig, measure, measure_cuda, timer_resolution_ns
from bench.verify import VerificationError, verify_outputs
from bench.workloads import GRIDS, AddNormCase, ModelCase, OpCase, shape_label
from env.paths import REPO_ROOT
from ops.dtypes import dtype_name, parse_dtypes

REPORTS_ENV = "FUSEDBENCH_REPORTS_DIR"
# Seconds of sampling per variant (after warm-up); --quick keeps CI under ~3 minutes.
BUDGET_S = {"full": 1.0, "quick": 0.25}
MIN_SAMPLES = 20  # per variant, over all rounds
ROUNDS = 3
FULL_RUN_PROCESSES = 3  # a full `invoke bench`: one round in each of this many fresh processes (see main)
REWARM_CALLS = 5  # warm-up before rounds 2..: caches only; the allocator and lazy init were warmed in round 1


@dataclass(frozen=True)
class BenchOptions:
    baseline: str = "all"
    quick: bool = False
    warmup: int = 50
    threads: int | None = None  # None or 0: every core this process may run on
    out_dir: Path | None = None
    dtype: str = ""  # "": each device's default dtypes (bench/workloads.py GRIDS)
    budget_s: float | None = None
    op_shapes: tuple[tuple[int, ...], ...] | None = None  # override every device's grid (tests)
    # The fused residual add + norm's shapes; None: the grid's (none when op_shapes overrides the grid)
    add_norm_shapes: tuple[tuple[int, ...], ...] | None = None
    model_batches: tuple[tuple[str, int, int], ...] | None = None
    rounds: int = ROUNDS
    device: str = "all"  # cpu | cuda | all (every device present) | a comma list
    l2_flush: bool = False  # CUDA: overwrite L2 before each timed call of a case that fits in it
    # Only these jobs (labels, as job_label gives them), with the limits they are read against; None: every job
    jobs: tuple[str, ...] | None = None
    # Only these rows (row_label: a job's label, "/", a variant), and no limits: rows looked at again, on their
    # own (an A/B run's second stage). None: every row of the planned jobs
    rows: tuple[str, ...] | None = None

    @property
    def mode(self) -> str:
        return "quick" if self.quick else "full"


@dataclass
class Outcome:
    paths: ReportPaths | None
    frame: object  # pandas.DataFrame of the report (None when nothing was measured)
    failures: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0


def reports_dir(out_dir: Path | str | None = None) -> Path:
    """--out, else $FUSEDBENCH_REPORTS_DIR, else <repo>/reports."""
    return Path(out_dir or os.environ.get(REPORTS_ENV) or REPO_ROOT / "reports").resolve()


def default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# --- step 1: plan ---------------------------------------------------------------------------


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


def _baseline_job(label: str, baseline: Baseline, case: _LazyCase, release: bool, selection: _Selection) -> Job:
    job = f"{label} {baseline.name}"

    def measurements() -> Iterator[tuple[object, str, Variant]]:
        current = case.get()
        try:
            for variant in baseline.variants(current):
                if selection.row(job, variant.name):
                    yield current, baseline.name, variant
        finally:
            if release:  # the case group's last job: free its tensors before the next case allocates
                case.release()

    return Job(job, measurements)


def _prefix(device: str) -> str:
    return "" if device == "cpu" else f"{device} "  # the CPU is the default device: its labels carry no prefix


def _op_jobs(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    device: str,
    baselines: list[Baseline],
    workdir: Path,
    selection: _Selection,
) -> list[Job]:
    case = _LazyCase(lambda: OpCase.create(shape, dtype, workdir, device=device))
    label = f"{_prefix(device)}op {shape_label(shape)} {dtype_name(dtype)}"
    baselines = [b for b in baselines if selection.job(f"{label} {b.name}")]
    copy = selection.limits and (baselines or selection.job(f"{label} copy"))
    jobs = [Job(f"{label} copy", lambda: iter(copy_limits(case.get())))] if copy else []
    last = len(baselines) - 1
    return jobs + [_baseline_job(label, b, case, i == last, selection) for i, b in enumerate(baselines)]


def _add_norm_jobs(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    device: str,
    baselines: list[Baseline],
    workdir: Path,
    selection: _Selection,
) -> list[Job]:
    # No copy job of its own: the op's copy rows at the same shape are its limit too (same bytes per second).
    case = _LazyCase(lambda: AddNormCase.create(shape, dtype, workdir, device=device))
    label = f"{_prefix(device)}add_norm {shape_label(shape)} {dtype_name(dtype)}"
    baselines = [b for b in baselines if selection.job(f"{label} {b.name}")]
    last = len(baselines) - 1
    return [_baseline_job(label, b, case, i == last, selection) for i, b in enumerate(baselines)]


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
    label = f"{_prefix(device)}model {name} {batch}x{seq} {dtype_name(dtype)}"
    baselines = [b for b in baselines if selection.job(f"{label} {b.name}")]
    last = len(baselines) - 1
    return [_baseline_job(label, b, case, i == last, selection) for i, b in enumerate(baselines)]


def _floor_job(device: str, workdir: Path) -> Job:
    if device == "cpu":
        return Job("limit dispatch floor", lambda: iter(dispatch_floor(workdir)))
    return Job(f"{_prefix(device)}limit launch floor", lambda: iter(launch_floor(workdir, device)))


def job_label(workload: str, shape: str, dtype: str, baseline: str, device: str) -> str | None:
    """The label of the job that measures a report row (its key's values); None for a limit row.

    Must read as _op_jobs, _add_norm_jobs and _model_jobs write them (a model row's
    shape is batch x sequence x hidden, its job names the grid's model).
    """
    if workload in ("op", "add_norm"):
        return f"{_prefix(device)}{workload} {shape} {dtype} {baseline}"
    if workload == "model":
        batch, seq = (int(d) for d in shape.split("x")[:2])
        grid = GRIDS[device]
        for name, b, s in grid.batches(True) + grid.batches(False):
            if (b, s) == (batch, seq):
                return f"{_prefix(device)}model {name} {batch}x{seq} {dtype} {baseline}"
        raise ValueError(f"no model of the {device} grid runs batch {batch} x sequence {seq}")
    return None


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
        op_shapes = options.op_shapes or grid.shapes(options.quick)
        add_norm_shapes = (
            options.add_norm_shapes
            if options.add_norm_shapes is not None
            else (() if options.op_shapes else grid.add_norm(options.quick))
        )
        batches = options.model_batches if options.model_batches is not None else grid.batches(options.quick)
        here = [b for b in baselines if device in b.devices]
        op_baselines = [b for b in here if "op" in b.workloads]
        add_norm_baselines = [b for b in here if "add_norm" in b.workloads]
        model_baselines = [b for b in here if "model" in b.workloads]
        if selection.limits:
            jobs.append(_floor_job(device, workdir))
        for dtype in dtypes:
            for shape in op_shapes:
                jobs += _op_jobs(shape, dtype, device, op_baselines, workdir, selection)
            for shape in add_norm_shapes if add_norm_baselines else ():
                jobs += _add_norm_jobs(shape, dtype, device, add_norm_baselines, workdir, selection)
            for name, batch, seq in batches:
                jobs += _model_jobs(name, batch, seq, dtype, device, model_baselines, workdir, selection)
    return jobs


# --- step 2: run a round --------------------------------------------------------------------


@dataclass(frozen=True)
class RunSettings:
    """What every round of one run shares: the timing method and the timer's measured resolution."""

    config: TimingConfig
    rounds: int
    resolution_ns: float
    l2_flush: bool = False
    _flushes: dict = field(default_factory=dict, compare=False, repr=False)  # device -> L2Flush, made on first use

    def round_config(self, round_index: int) -> TimingConfig:
        """Round 0 warms up fully; later rounds re-warm caches only. Each round takes 1/rounds of the budget."""
        return replace(
            self.config,
            warmup=self.config.warmup if round_index == 0 else min(self.config.warmup, REWARM_CALLS),
            budget_s=self.config.budget_s / self.rounds,
            min_samples=max(1, -(-self.config.min_samples // self.rounds)),
        )

    def flush_for(self, case) -> L2Flush | None:
        """The device's L2 flush when --l2-flush is on and the case's bytes fit in L2 (larger ones evict themselves)."""
        if not self.l2_flush or case.device == "cpu" or math.isnan(case.bytes_moved):
            return None
        if case.device not in self._flushes:
            self._flushes[case.device] = L2Flush(case.device)
        flush = self._flushes[case.device]
        return flush if case.bytes_moved <= flush.l2_bytes else None


@dataclass
class MeasuredRow:
    """One variant's measurements, accumulated over the rounds."""

    case: metrics.CaseInfo  # not the case itself: its tensors must not live for the whole run
    baseline: str
    variant: str
    note: str
    setup_s: float  # the first round's: later rounds re-use its caches
    block: int
    timer: str
    timings: list[Timing] = field(default_factory=list)

    def pooled(self) -> tuple[Timing, RowSamples]:
        """The rounds as one timing; its warm-up is the first round's (the calls made, maybe fewer than asked)."""
        values = np.concatenate([t.samples_us for t in self.timings])
        rounds = np.concatenate([np.full(len(t.samples_us), r, dtype=np.int16) for r, t in enumerate(self.timings)])
        others = sum(t.other_cpu_s for t in self.timings)
        wall = sum(t.wall_s for t in self.timings)
        faults, calls = sum(t.minor_faults for t in self.timings), sum(t.calls for t in self.timings)
        warmup = self.timings[0].warmup
        return Timing(values, self.block, warmup, others, wall, faults, calls), RowSamples(values, rounds)


@dataclass
class Results:
    """Everything measured so far; a row that fails or is skipped in any round is dropped for good."""

    measured: dict[tuple[str, ...], MeasuredRow] = field(default_factory=dict)
    dropped: set[tuple[str, ...]] = field(default_factory=set)
    failures: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def drop(self, key: tuple[str, ...]) -> None:
        self.dropped.add(key)
        self.measured.pop(key, None)


@dataclass(frozen=True)
class _Measured:
    timing: Timing
    setup_s: float
    note: str
    timer: str  # the report's "timer" column


def _time(
    case, prepared: Prepared, config: TimingConfig, settings: RunSettings, block: int | None
) -> tuple[Timing, str]:
    """The host clock on the CPU (or where the call synchronises itself), CUDA events on a GPU."""
    if case.device == "cpu" or prepared.timer == "perf_counter":
        timing = measure(prepared.call, config, settings.resolution_ns, block)
        return replace(
            timing, samples_us=timing.samples_us / prepared.calls, calls=timing.calls * prepared.calls
        ), "perf_counter"
    flush = settings.flush_for(case)
    timing = measure_cuda(prepared.call, config, block, flush, prepared.calls)
    return timing, "cuda_events+l2_flush" if flush is not None else "cuda_events"


def _measure(case, variant: Variant, config: TimingConfig, settings: RunSettings, block: int | None) -> _Measured:
    started = time.perf_counter()
    prepared = variant.prepare()
    setup_s = time.perf_counter() - started
    if not isinstance(prepared, Prepared):
        prepared = Prepared(prepared, variant.note)
    verify_outputs(prepared.call(), case.reference(), case.tolerance)  # every round: a wrong call is never timed
    bench_turns.current().begin()  # in an A/B worker, the first turn: everything above ran beside the other build
    # The setup above ran unpinned: pools it created keep every CPU. A parallel call is not pinned at all.
    with pinned_for_timing(torch.get_num_threads() if case.device == "cpu" else 1):
        timing, timer = _time(case, prepared, config, settings, block)
    return _Measured(timing, setup_s + prepared.reused_setup_s, prepared.note or variant.note, timer)


def _run_variant(
    case,
    baseline: str,
    variant: Variant,
    round_index: int,
    config: TimingConfig,
    settings: RunSettings,
    results: Results,
) -> None:
    device = device_label(case.device)
    key = RowKey(
        workload=case.workload,
        shape=shape_label(case.shape),
        dtype=dtype_name(case.dtype),
        baseline=baseline,
        variant=variant.name,
        device=device,
    )
    if key in results.dropped:
        return
    where = (
        _prefix(case.device)
        + " ".join(key[:3])
        + f" {baseline}/{variant.name}"
        + (f" (round {round_index + 1})" if round_index else "")
    )
    row = results.measured.get(key)
    try:
        measured = _measure(case, variant, config, settings, row.block if row else None)
    except Unsupported as reason:
        results.skipped.append(f"{where}: {reason}")
    except VerificationError as error:
        results.failures.append(f"{where}: WRONG OUTPUT - {error}")
    except Exception as error:  # one broken variant must not hide the others' results
        results.failures.append(f"{where}: {type(error).__name__}: {error}")
    else:
        if row is None:
            info = metrics.CaseInfo.of(case, device)
            row = results.measured[key] = MeasuredRow(
                info, baseline, variant.name, measured.note, measured.setup_s, measured.timing.block, measured.timer
            )
        row.timings.append(measured.timing)
        return
    results.drop(key)


def run_round(
    jobs: list[Job],
    round_index: int,
    settings: RunSettings,
    results: Results,
    on_job: Callable[[Job], None] | None = None,
) -> None:
    """One pass over ``jobs``, adding to ``results``; ``on_job`` is called before each job (progress)."""
    config = settings.round_config(round_index)
    for job in jobs:
        if on_job is not None:
            on_job(job)
        try:
            for case, baseline, variant in job.measurements():
                _run_variant(case, baseline, variant, round_index, config, settings, results)
        except Unsupported as reason:
            results.skipped.append(f"{job.label}: {reason}")
        except Exception as error:
            results.failures.append(f"{job.label}: {type(error).__name__}: {error}")
        finally:
            gc.collect()  # free the job's buffers/sessions before the next one allocates
            # What survived the job (an ORT session's module, Inductor's and dynamo's caches, the compiler
            # stack a first compile imports: 400 000 objects and more) outlives the run: frozen, the full
            # collection that starts every measurement (bench/timing.py) skips it. Unfrozen, each took about
            # 0.3 s: a warm A/B process's quick jobs took 21 s, frozen 8 s. Refcounting still frees them.
            gc.freeze()


# --- step 3: record -------------------------------------------------------------------------


def record_results(
    results: Results,
    settings: RunSettings,
    env: dict[str, object],
    out_dir: Path | None,
    started: float,
    plot: bool = True,
) -> Outcome:
    """Pool each row's rounds, add the ratios, write the report (CSV, samples, and the plot unless ``plot`` False)."""
    skipped = list(dict.fromkeys(results.skipped))  # a job-level skip repeats every round
    failures = list(dict.fromkeys(results.failures))
    rows, samples = [], {}
    for key, row in results.measured.items():
        timing, row_samples = row.pooled()
        rows.append(
            metrics.measurement_row(
                row.case,
                row.baseline,
                row.variant,
                row.note,
                timing,
                row.setup_s,
                settings.resolution_ns,
                env,
                settings.rounds,
                row.timer,
            )
        )
        samples[key] = row_samples
    if not rows:
        return Outcome(
            paths=None,
            frame=None,
            failures=failures or ["nothing was measured"],
            skipped=skipped,
            seconds=time.perf_counter() - started,
        )
    frame = to_frame(metrics.add_ratios(to_frame(rows)))
    paths = write_report(_unique_csv(reports_dir(out_dir), str(env["timestamp_utc"]), str(env["host"])), frame, samples)
    if plot:
        from bench.plot import write_plot

        write_plot(frame, paths.plot)
    return Outcome(paths=paths, frame=frame, failures=failures, skipped=skipped, seconds=time.perf_counter() - started)


def _unique_csv(directory: Path, timestamp: str, host: str) -> Path:
    safe_host = "".join(c if c.isalnum() or c in "-_." else "_" for c in host)
    path = directory / f"{timestamp}-{safe_host}.csv"
    suffix = 2
    while path.exists():
        path = directory / f"{timestamp}-{safe_host}-{suffix}.csv"
        suffix += 1
    return path


# --- the run --------------------------------------------------------------------------------


def run_settings(options: BenchOptions) -> RunSettings:
    if options.rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {options.rounds}")
    config = TimingConfig(
        warmup=options.warmup, budget_s=options.budget_s or BUDGET_S[options.mode], min_samples=MIN_SAMPLES
    )
    return RunSettings(
        config=config, rounds=options.rounds, resolution_ns=timer_resolution_ns(), l2_flush=options.l2_flush
    )


def validate(options: BenchOptions) -> tuple[list[Baseline], list[str]]:
    """The baselines and devices ``options`` name; ValueError (naming the option) for a bad name, dtype or device."""
    baselines = select(options.baseline)
    devices = resolve_devices(options.device)
    for device in devices:
        parse_dtypes(options.dtype or GRIDS[device].dtypes)
    return baselines, devices


def run_bench(options: BenchOptions, console: Console | None = None) -> Outcome:
    """Measure, write the report (CSV, samples, plot) and return it; the caller prints the summary."""
    threads_before = torch.get_num_threads()
    try:
        return _run_bench(options, console or Console())
    finally:
        gc.unfreeze()  # what the run froze (below) is the collector's again
        torch.set_num_threads(threads_before)  # a run inside a larger process leaves its thread count as it was


def _run_bench(options: BenchOptions, console: Console) -> Outcome:
    started = time.perf_counter()
    fix_malloc_policy()  # before any case allocates: fresh outputs fault alike in every process (bench/allocator.py)
    threads = options.threads or default_threads()
    torch.set_num_threads(threads)
    baselines, devices = validate(options)  # before anything is measured: a bad name, dtype or device fails at once
    settings = run_settings(options)
    # Each measurement starts with a full collection (bench/timing.py). Once
    # the baselines are imported (torch's compiler stack among them) the heap
    # holds millions of objects that outlive the run, and walking them took
    # most of a small run's time; frozen, they are skipped, and a collection
    # walks only what the run itself created, the earlier cases' garbage.
    gc.collect()
    gc.freeze()
    env = environment_columns(threads, "cpu", utc_timestamp())  # "device" is set per row
    names = [device_label(d) for d in devices]
    dtypes = {options.dtype or GRIDS[d].dtypes for d in devices}
    dtype_text = (
        dtypes.pop() if len(dtypes) == 1 else "; ".join(f"{d} {options.dtype or GRIDS[d].dtypes}" for d in devices)
    )
    console.print(
        f"[bold]fusedbench[/] {options.mode} run on {', '.join(names)}: "
        f"baselines {[b.name for b in baselines if b.devices & set(devices)]}, "
        f"dtype {dtype_text}, "
        f"{threads} threads, warm-up {settings.config.warmup} calls (within the budget), "
        f"{settings.config.budget_s:g} s per variant over "
        f"{settings.rounds} rounds, timer resolution {settings.resolution_ns:.0f} ns"
        + (
            ""
            if devices == ["cpu"]
            else f"; CUDA: events, "
            f"L2 {'flushed before each call that fits in it' if options.l2_flush else 'warm (calls back to back)'}"
        )
    )
    results = Results()
    if options.baseline.strip() != "all":  # named but not runnable on any device measured: say so
        results.skipped += [
            f"{b.name}: runs on {', '.join(sorted(b.devices))} only" for b in baselines if not b.devices & set(devices)
        ]
    with tempfile.TemporaryDirectory(prefix="fusedbench-") as tmp:
        jobs = plan_jobs(options, Path(tmp))
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task("", total=len(jobs) * settings.rounds)
            for round_index in range(settings.rounds):

                def on_job(job: Job, round_index=round_index) -> None:
                    progress.update(
                        task, advance=1, description=f"round {round_index + 1}/{settings.rounds}: {job.label}"
                    )

                run_round(jobs, round_index, settings, results, on_job)
    return record_results(results, settings, env, options.out_dir, started)


def main(options: BenchOptions) -> int:
    """Run, print the summary and where the files are; return the process exit code.

    A full run measures in FULL_RUN_PROCESSES fresh processes, one round each
    (bench/ab.py, as an A/B run does): its rows then carry the spread between
    processes (buffer layout, thread placement), not one process's luck.
    """
    from bench.summary import print_summary

    if not options.quick:
        from bench.ab import run_in_processes

        validate(options)
        return run_in_processes(options, FULL_RUN_PROCESSES)

    console = Console(width=None if Console().is_terminal else 200)  # logs and CI: wide enough for the table
    outcome = run_bench(options, console)
    print_summary(outcome, console)
    return 1 if outcome.failures else 0
