"""The second and third steps of a run: time the planned jobs round by round, then pool and record them.

  - :func:`run_round` - one pass over the jobs. Every variant is prepared
    (outside the timed loop), verified against the float64 reference, warmed
    up and timed (bench/measure/timing.py: the host clock on the CPU, CUDA
    events on a GPU); its timing is added to :class:`Results`;
  - :func:`record_results` - pool each row's rounds, add the ratios and write
    the report (CSV, samples, plot).

A plain run (bench/run.py) calls both in one process; each worker of a
multi-process or A/B run (bench/processes/worker.py) calls them one job at a time.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from bench.measure import core_sync
from bench.measure import turns as bench_turns
from bench.measure.pinning import pinned_for_timing
from bench.measure.placement import NATURAL
from bench.measure.timing import L2Flush, Timing, TimingConfig, measure, measure_cuda, timer_resolution_ns
from bench.measure.verify import CaseReferences, VerificationError, verify_outputs
from bench.plan.devices import device_label
from bench.plan.grid import shape_label
from bench.plan.jobs import Job, device_prefix
from bench.plan.options import BUDGET_S, MIN_SAMPLES, ROUND_FLOOR_CAP, BenchOptions, unique_csv
from bench.plan.registry import Prepared, Unsupported, Variant
from bench.report import metrics
from bench.report.schema import ReportPaths, RowKey, RowSamples, to_frame, write_report
from env.paths import reports_dir
from ops.dtypes import dtype_name

REWARM_CALLS = 5  # warm-up before rounds 2..: caches only; the allocator and lazy init were warmed in round 1


@dataclass
class Outcome:
    paths: ReportPaths | None
    frame: object  # pandas.DataFrame of the report (None when nothing was measured)
    failures: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(frozen=True)
class RunSettings:
    """What every round of one run shares: the timing method and the timer's measured resolution."""

    config: TimingConfig
    rounds: int
    resolution_ns: float
    l2_flush: bool = False
    _flushes: dict = field(default_factory=dict, compare=False, repr=False)  # device -> L2Flush, made on first use

    def round_config(self, round_index: int) -> TimingConfig:
        """Round 0 warms up fully; later rounds re-warm caches only. Each round takes 1/rounds of the budget and of
        the sample floor (at most ROUND_FLOOR_CAP)."""
        return replace(
            self.config,
            warmup=self.config.warmup if round_index == 0 else min(self.config.warmup, REWARM_CALLS),
            budget_s=self.config.budget_s / self.rounds,
            min_samples=max(1, min(ROUND_FLOOR_CAP, -(-self.config.min_samples // self.rounds))),
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
        sync = np.concatenate([np.full(len(t.samples_us), t.sync_us) for t in self.timings])
        timing = Timing(values, self.block, warmup, others, wall, faults, calls)
        return timing, RowSamples.probed(values, rounds, sync)


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


def _measure(
    case,
    variant: Variant,
    config: TimingConfig,
    settings: RunSettings,
    block: int | None,
    references: CaseReferences,
) -> _Measured:
    threads = torch.get_num_threads() if case.device == "cpu" else 1
    # Before the variant's setup, so the probe's own threads have long gone idle when the timing starts.
    sync_before = core_sync.sync_probe_us(threads)
    started = time.perf_counter()
    prepared = variant.prepare()
    setup_s = time.perf_counter() - started
    if not isinstance(prepared, Prepared):
        prepared = Prepared(prepared, variant.note)
    verify_outputs(prepared.call(), references.of(case), case.tolerance)  # every round: a wrong call is never timed
    bench_turns.current().begin()  # in an A/B worker, the first turn: everything above ran beside the other build
    # The setup above ran unpinned: pools it created keep every CPU. A parallel call is not pinned at all.
    with pinned_for_timing(threads):
        timing, timer = _time(case, prepared, config, settings, block)
    timing = replace(timing, sync_us=core_sync.bracket(sync_before, core_sync.sync_probe_us(threads)))
    return _Measured(timing, setup_s + prepared.reused_setup_s, prepared.note or variant.note, timer)


def _run_variant(
    case,
    baseline: str,
    variant: Variant,
    round_index: int,
    config: TimingConfig,
    settings: RunSettings,
    results: Results,
    references: CaseReferences,
) -> None:
    device = device_label(case.device)
    layout = getattr(case, "layout", NATURAL)  # a case that places nothing has its buffers as allocated
    key = RowKey(
        workload=case.workload,
        shape=shape_label(case.shape),
        dtype=dtype_name(case.dtype),
        baseline=baseline,
        variant=variant.name,
        device=device,
        layout=layout,
    )
    if key in results.dropped:
        return
    where = (
        device_prefix(case.device)
        + " ".join(key[:3])
        + (f" {layout}" if layout != NATURAL else "")
        + f" {baseline}/{variant.name}"
        + (f" (round {round_index + 1})" if round_index else "")
    )
    row = results.measured.get(key)
    try:
        measured = _measure(case, variant, config, settings, row.block if row else None, references)
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
    references: CaseReferences | None = None,
) -> None:
    """One pass over ``jobs``, adding to ``results``; ``on_job`` is called before each job (progress).

    ``references``: the prepared references of a caller that runs a round one job a call, so that a case's jobs
    (one per baseline) share its prepared reference; None: this call's own.
    """
    config = settings.round_config(round_index)
    references = references if references is not None else CaseReferences()
    for job in jobs:
        if on_job is not None:
            on_job(job)
        try:
            for case, baseline, variant in job.measurements():
                _run_variant(case, baseline, variant, round_index, config, settings, results, references)
        except Unsupported as reason:
            results.skipped.append(f"{job.label}: {reason}")
        except Exception as error:
            results.failures.append(f"{job.label}: {type(error).__name__}: {error}")
        finally:
            gc.collect()  # free the job's buffers/sessions before the next one allocates
            # What survived the job (an ORT session's module, Inductor's and dynamo's caches, the compiler
            # stack a first compile imports: 400 000 objects and more) outlives the run: frozen, the full
            # collection that starts every measurement (bench/measure/timing.py) skips it. Unfrozen, each took about
            # 0.3 s: a warm A/B process's quick jobs took 21 s, frozen 8 s. Refcounting still frees them.
            gc.freeze()


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
    paths = write_report(unique_csv(reports_dir(out_dir), str(env["timestamp_utc"]), str(env["host"])), frame, samples)
    if plot:
        from bench.report.plot import write_plot

        write_plot(frame, paths.plot)
    return Outcome(paths=paths, frame=frame, failures=failures, skipped=skipped, seconds=time.perf_counter() - started)


def run_settings(options: BenchOptions) -> RunSettings:
    if options.rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {options.rounds}")
    config = TimingConfig(
        warmup=options.warmup,
        budget_s=options.budget_s or BUDGET_S[options.mode],
        min_samples=MIN_SAMPLES,
        precision=options.precision,
        steady_warmup=True,
        calls_before=1,  # the verified call (_measure), which touched the output's pages and lazy state first
    )
    return RunSettings(
        config=config, rounds=options.rounds, resolution_ns=timer_resolution_ns(), l2_flush=options.l2_flush
    )
