"""``invoke bench``: measure the limits and every selected baseline, then write the report.

Order of work: dispatch floor; then per case (shape x dtype) the copy limit and
every baseline back to back, so ratios within a case share the machine's state;
then the model-level cases. Every variant is prepared (outside the timed loop),
verified against the float64 reference, warmed up and timed (bench/timing.py).

The whole grid is passed over ROUNDS times, each round taking 1/ROUNDS of every
variant's time budget (asv's "rounds"): a variant's samples are then spread over
the run, so a stretch of a few seconds in which the machine is slow (other
virtual machines on the host, frequency changes - seen here as 25-60 % for ~20 s)
touches only some of its rounds. `invoke compare` uses the rounds to tell such
a stretch from a real slowdown. Later rounds re-use the first round's setup
(export files, Inductor's cache) and re-warm with REWARM_CALLS calls.
"""

from __future__ import annotations

import gc
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
from bench.environment import environment_columns, utc_timestamp
from bench.limits import copy_limit, dispatch_floor
from bench.registry import Baseline, Prepared, Unsupported, Variant, select
from bench.report import ReportPaths, RowSamples, to_frame, write_report
from bench.timing import Timing, TimingConfig, measure, timer_resolution_ns
from bench.verify import VerificationError, verify
from bench.workloads import (
    MODEL_BATCHES_FULL,
    MODEL_BATCHES_QUICK,
    OP_SHAPES_FULL,
    OP_SHAPES_QUICK,
    ModelCase,
    OpCase,
    dtype_name,
    parse_dtypes,
    shape_label,
)
from env.paths import REPO_ROOT

REPORTS_ENV = "FUSEDBENCH_REPORTS_DIR"
# Seconds of sampling per variant (after warm-up); --quick keeps CI under ~3 minutes.
BUDGET_S = {"full": 1.0, "quick": 0.25}
MIN_SAMPLES = 20  # per variant, over all rounds
ROUNDS = 3
REWARM_CALLS = 5  # warm-up before rounds 2..: caches only; the allocator and lazy init were warmed in round 1


@dataclass(frozen=True)
class BenchOptions:
    baseline: str = "all"
    quick: bool = False
    warmup: int = 50
    threads: int | None = None  # None or 0: every core this process may run on
    out_dir: Path | None = None
    dtype: str = "float32"
    budget_s: float | None = None
    op_shapes: tuple[tuple[int, int, int], ...] | None = None  # override the grid (tests)
    model_batches: tuple[tuple[str, int, int], ...] | None = None
    rounds: int = ROUNDS


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


@dataclass(frozen=True)
class _Job:
    """One (case, baseline) unit of work; the case is built lazily so big inputs live one at a time."""

    label: str
    run: Callable[[], Iterator[tuple[object, str, Variant]]]


def _jobs(options: BenchOptions, baselines: list[Baseline], workdir: Path) -> list[_Job]:
    dtypes = parse_dtypes(options.dtype)
    op_shapes = options.op_shapes or (OP_SHAPES_QUICK if options.quick else OP_SHAPES_FULL)
    batches = options.model_batches if options.model_batches is not None else (MODEL_BATCHES_QUICK if options.quick else MODEL_BATCHES_FULL)
    jobs = [_Job("limit dispatch floor", lambda: iter(dispatch_floor(workdir)))]
    op_baselines = [b for b in baselines if "op" in b.workloads]
    model_baselines = [b for b in baselines if "model" in b.workloads]
    for dtype in dtypes:
        for shape in op_shapes:
            cache: dict[str, OpCase] = {}

            def case(shape=shape, dtype=dtype, cache=cache) -> OpCase:
                if "case" not in cache:
                    cache["case"] = OpCase.create(shape, dtype, workdir)
                return cache["case"]

            def release(cache=cache) -> None:
                cache.clear()

            label = f"op {shape_label(shape)} {dtype_name(dtype)}"
            jobs.append(_Job(f"{label} copy", lambda case=case: iter([copy_limit(case())])))
            for i, baseline in enumerate(op_baselines):
                last = i == len(op_baselines) - 1
                jobs.append(_Job(f"{label} {baseline.name}", _baseline_work(baseline, case, release if last else None)))
        for name, batch, seq in batches:
            holder: dict[str, ModelCase] = {}

            def model_case(name=name, batch=batch, seq=seq, dtype=dtype, holder=holder) -> ModelCase:
                if "case" not in holder:
                    holder["case"] = ModelCase.create(name, batch, seq, dtype, workdir)
                return holder["case"]

            label = f"model {name} {batch}x{seq} {dtype_name(dtype)}"
            for baseline in model_baselines:
                jobs.append(_Job(f"{label} {baseline.name}", _baseline_work(baseline, model_case, None)))
    return jobs


def _baseline_work(baseline: Baseline, case: Callable[[], object], release: Callable[[], None] | None):
    def work() -> Iterator[tuple[object, str, Variant]]:
        current = case()
        try:
            for variant in baseline.variants(current):
                yield current, baseline.name, variant
        finally:
            if release is not None:
                release()

    return work


def _measure(case, variant: Variant, config: TimingConfig, resolution_ns: float, block: int | None) -> tuple[Timing, float, str]:
    started = time.perf_counter()
    prepared = variant.prepare()
    setup_s = time.perf_counter() - started
    if not isinstance(prepared, Prepared):
        prepared = Prepared(prepared, variant.note)
    verify(prepared.call(), case.reference(), case.tolerance, "output")  # every round: a wrong call is never timed
    return measure(prepared.call, config, resolution_ns, block), setup_s + prepared.reused_setup_s, prepared.note or variant.note


@dataclass
class _Row:
    """One variant's measurements, accumulated over the rounds."""

    case: metrics.CaseInfo  # not the case itself: its tensors must not live for the whole run
    baseline: str
    variant: str
    note: str
    setup_s: float  # the first round's: later rounds re-use its caches
    block: int
    timings: list[Timing] = field(default_factory=list)

    def pooled(self, warmup: int) -> tuple[Timing, RowSamples]:
        values = np.concatenate([t.samples_us for t in self.timings])
        rounds = np.concatenate([np.full(len(t.samples_us), r, dtype=np.int16) for r, t in enumerate(self.timings)])
        others = sum(t.other_cpu_s for t in self.timings)
        wall = sum(t.wall_s for t in self.timings)
        return Timing(values, self.block, warmup, others, wall), RowSamples(values, rounds)


def run_bench(options: BenchOptions, console: Console | None = None) -> Outcome:
    """Measure, write the report (CSV, samples, plot) and return it; the caller prints the summary."""
    threads_before = torch.get_num_threads()
    try:
        return _run_bench(options, console or Console())
    finally:
        torch.set_num_threads(threads_before)  # a run inside a larger process leaves its thread count as it was


def _run_bench(options: BenchOptions, console: Console) -> Outcome:
    started = time.perf_counter()
    threads = options.threads or default_threads()
    torch.set_num_threads(threads)
    mode = "quick" if options.quick else "full"
    config = TimingConfig(warmup=options.warmup, budget_s=options.budget_s or BUDGET_S[mode], min_samples=MIN_SAMPLES)
    baselines = select(options.baseline)
    timestamp = utc_timestamp()
    env = environment_columns(threads, "cpu", timestamp)
    resolution_ns = timer_resolution_ns()
    console.print(
        f"[bold]fusedbench[/] {mode} run: baselines {[b.name for b in baselines]}, dtype {options.dtype}, "
        f"{threads} threads, warm-up {config.warmup} calls, {config.budget_s:g} s per variant over {options.rounds} rounds, "
        f"timer resolution {resolution_ns:.0f} ns"
    )
    if options.rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {options.rounds}")
    measured: dict[tuple[str, ...], _Row] = {}
    dropped: set[tuple[str, ...]] = set()  # failed or skipped in some round: no row at all
    failures, skipped = [], []
    with tempfile.TemporaryDirectory(prefix="fusedbench-") as tmp:
        jobs = _jobs(options, baselines, Path(tmp))
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task("", total=len(jobs) * options.rounds)
            for round_index in range(options.rounds):
                round_config = replace(
                    config,
                    warmup=config.warmup if round_index == 0 else min(config.warmup, REWARM_CALLS),
                    budget_s=config.budget_s / options.rounds,
                    min_samples=max(1, -(-config.min_samples // options.rounds)),
                )
                for job in jobs:
                    progress.update(task, description=f"round {round_index + 1}/{options.rounds}: {job.label}")
                    try:
                        for case, baseline, variant in job.run():
                            key = (case.workload, shape_label(case.shape), dtype_name(case.dtype), baseline, variant.name)
                            if key in dropped:
                                continue
                            where = " ".join(key[:3]) + f" {baseline}/{variant.name}" + (f" (round {round_index + 1})" if round_index else "")
                            row = measured.get(key)
                            try:
                                timing, setup_s, note = _measure(case, variant, round_config, resolution_ns, row.block if row else None)
                            except Unsupported as reason:
                                skipped.append(f"{where}: {reason}")
                            except VerificationError as error:
                                failures.append(f"{where}: WRONG OUTPUT - {error}")
                            except Exception as error:  # one broken variant must not hide the others' results
                                failures.append(f"{where}: {type(error).__name__}: {error}")
                            else:
                                if row is None:
                                    row = measured[key] = _Row(metrics.CaseInfo.of(case), baseline, variant.name, note, setup_s, timing.block)
                                row.timings.append(timing)
                                continue
                            dropped.add(key)
                            measured.pop(key, None)
                    except Unsupported as reason:
                        skipped.append(f"{job.label}: {reason}")
                    except Exception as error:
                        failures.append(f"{job.label}: {type(error).__name__}: {error}")
                    finally:
                        gc.collect()  # free the job's buffers/sessions before the next one allocates
                    progress.advance(task)
    skipped = list(dict.fromkeys(skipped))  # a job-level skip repeats every round
    failures = list(dict.fromkeys(failures))
    rows, samples = [], {}
    for key, row in measured.items():
        timing, row_samples = row.pooled(config.warmup)
        rows.append(metrics.measurement_row(row.case, row.baseline, row.variant, row.note, timing, row.setup_s, resolution_ns, env, options.rounds))
        samples[key] = row_samples
    if not rows:
        return Outcome(paths=None, frame=None, failures=failures or ["nothing was measured"], skipped=skipped, seconds=time.perf_counter() - started)
    frame = to_frame(metrics.add_ratios(to_frame(rows)))
    paths = write_report(_unique_csv(reports_dir(options.out_dir), timestamp, str(env["host"])), frame, samples)
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


def main(options: BenchOptions) -> int:
    """Run, print the summary and where the files are; return the process exit code."""
    from bench.summary import print_summary

    console = Console(width=None if Console().is_terminal else 200)  # logs and CI: wide enough for the table
    outcome = run_bench(options, console)
    print_summary(outcome, console)
    return 1 if outcome.failures else 0

