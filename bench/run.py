"""``invoke bench``: measure the limits and every selected baseline, then write the report.

The run is three plain steps, each a public function so other drivers (the
processes of a multi-process or A/B run) can compose them:
  1. :func:`bench.plan.jobs.plan_jobs` - the ordered list of jobs, device by device (``--device``,
     default every device present): the dispatch or launch floor; then per case
     (shape x dtype of that device's grid) the copy limit and every baseline
     that runs on the device, back to back, so ratios within a case share the
     machine's state; then the model-level cases;
  2. :func:`bench.rounds.run_round` - one pass over the jobs. Every variant is prepared
     (outside the timed loop), verified against the float64 reference, warmed
     up and timed (bench/measure/timing.py: the host clock on the CPU, CUDA events on
     a GPU); its timing is added to :class:`Results`;
  3. :func:`bench.rounds.record_results` - pool each row's rounds, add the ratios and write
     the report (CSV, samples, plot).

The whole grid is passed over ROUNDS times, each round taking 1/ROUNDS of every
variant's time budget (asv's "rounds"): a variant's samples are then spread over
the run, so a stretch of a few seconds in which the machine is slow (other
virtual machines on the host, frequency changes) touches only some of its
rounds. `invoke bench.compare` uses the rounds to tell such a stretch from a
real slowdown. Later rounds re-use the first round's setup
(export files, Inductor's cache) and re-warm with REWARM_CALLS calls.
"""

from __future__ import annotations

import gc
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console

from bench.measure.allocator import check_policy, set_malloc_policy
from bench.measure.environment import environment_columns, utc_timestamp
from bench.measure.verify import CaseReferences
from bench.plan.devices import device_label, resolve_devices
from bench.plan.grid import GRIDS
from bench.plan.jobs import plan_jobs
from bench.plan.options import BenchOptions, default_threads
from bench.plan.registry import Baseline, select
from bench.report.progress import RunProgress
from bench.rounds import Outcome, Results, record_results, run_round, run_settings
from ops.dtypes import parse_dtypes

FULL_RUN_PROCESSES = 3  # a full `invoke bench`: one round in each of this many fresh processes (see main)


def validate(options: BenchOptions) -> tuple[list[Baseline], list[str]]:
    """The baselines and devices ``options`` name; ValueError (naming the option) for a bad name, dtype or device."""
    check_policy(options.allocator)
    baselines = select(options.baseline)
    devices = resolve_devices(options.device)
    for device in devices:
        parse_dtypes(options.dtype or GRIDS[device].dtypes)
    return baselines, devices


def run_bench(options: BenchOptions, console: Console | None = None, workdir: Path | None = None) -> Outcome:
    """Measure, write the report (CSV, samples, plot) and return it; the caller prints the summary.

    ``workdir``: where the run's setup is cached on disk (ONNX exports; the caller may have filled it ahead);
    default a temporary folder of its own."""
    threads_before = torch.get_num_threads()
    try:
        return _run_bench(options, console or Console(), workdir)
    finally:
        gc.unfreeze()  # what the run froze (below) is the collector's again
        torch.set_num_threads(threads_before)  # a run inside a larger process leaves its thread count as it was


def _run_bench(options: BenchOptions, console: Console, workdir: Path | None) -> Outcome:
    started = time.perf_counter()
    # Before any case allocates: the policy holds for every block the run allocates (bench/measure/allocator.py).
    set_malloc_policy(options.allocator)
    threads = options.threads or default_threads()
    torch.set_num_threads(threads)
    baselines, devices = validate(options)  # before anything is measured: a bad name, dtype or device fails at once
    settings = run_settings(options)
    # Each measurement starts with a full collection (bench/measure/timing.py). Once
    # the baselines are imported (torch's compiler stack among them) the heap
    # holds millions of objects that outlive the run, and walking them took
    # most of a small run's time; frozen, they are skipped, and a collection
    # walks only what the run itself created, the earlier cases' garbage.
    gc.collect()
    gc.freeze()
    env = environment_columns(threads, "cpu", utc_timestamp(), settings.config.precision)  # "device": per row
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
        jobs = plan_jobs(options, workdir or Path(tmp))
        references = CaseReferences()  # a case's prepared reference, shared by its jobs
        with RunProgress(console, len(jobs) * settings.rounds) as progress:
            for round_index in range(settings.rounds):
                for job in jobs:  # one job at a time, so the progress knows when each ends
                    label = f"round {round_index + 1}/{settings.rounds}: {job.label}"
                    progress.start_job(label)
                    began = time.perf_counter()
                    run_round([job], round_index, settings, results, references=references)
                    progress.finish_job(label, time.perf_counter() - began)
    return record_results(results, settings, env, options.out_dir, started)


def main(options: BenchOptions, verbose: bool = False, setup_cache: Path | None = None) -> int:
    """Run, print the summary (``verbose``: the full table too) and where the files are; return the exit code.

    ``setup_cache``: a folder for the setup the run caches on disk, which the caller may have filled ahead
    (bench/plan/warm_exports.py, into bench/processes/workdirs.py's run_workdir of it); default a temporary one.

    A full run measures in FULL_RUN_PROCESSES fresh processes, one round each
    (bench/ab/driver.py, as an A/B run does): its rows then carry the spread between
    processes (buffer layout, thread placement), not one process's luck.
    """
    from bench.report.summary import print_summary

    if not options.quick:
        from bench.ab.driver import run_in_processes

        validate(options)
        return run_in_processes(options, FULL_RUN_PROCESSES, verbose, setup_cache)

    console = Console(width=None if Console().is_terminal else 200)  # logs and CI: wide enough for the table
    from bench.processes.workdirs import run_workdir

    outcome = run_bench(options, console, None if setup_cache is None else run_workdir(setup_cache))
    print_summary(outcome, console, verbose)
    return 1 if outcome.failures else 0
