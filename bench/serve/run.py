"""``invoke bench.serve``: serve the model to concurrent clients; write the report rows; print the summary.

Order: export the model by each route (or reuse the files of an earlier run
for the same model), build the bank of inputs and references, then for each
configuration (bench/serve/configs.py): create what serves it, warm every
client up, run the clients for the time budget, check every response. The
plan is passed over in rounds (as `invoke bench` does), each round taking its
share of every configuration's time. Each configuration becomes one report row
(workload ``serve``) whose samples are the per-request latencies.

SIGINT and SIGTERM stop the run within about a second: clients finish the
request in hand, nothing is written (the report files are only ever written
whole, at the end) and the process exits at once with 130 (SIGINT) or 143
(SIGTERM).
"""

from __future__ import annotations

import math
import os
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from rich.console import Console

from bench.measure.environment import environment_columns, utc_timestamp
from bench.measure.timing import Timing, timer_resolution_ns
from bench.plan.options import unique_csv
from bench.report import metrics
from bench.report.schema import ReportPaths, RowSamples, row_key, to_frame, write_report
from bench.serve.configs import ServeConfig, plan
from bench.serve.engines import Served, serve
from bench.serve.load import LoadResult, Stopped, drive
from bench.serve.models import Bank, ServedModel, export_routes, make_bank
from env.paths import reports_dir
from ops.ort.session import physical_cores

# Seconds of load per configuration, split over ROUNDS passes of the whole plan:
# a few slow seconds on a shared machine then touch only part of each row.
DURATION_S = {"full": 1.5, "quick": 0.25}
ROUNDS = {"full": 3, "quick": 1}
WARMUP_REQUESTS = 20  # per client, before the window


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived; ``code`` is the conventional exit status.

    A BaseException, as KeyboardInterrupt is: no ``except Exception`` on the way (a failing session's
    creation, one configuration that cannot run) may swallow it.
    """

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.code = 128 + signum


@dataclass(frozen=True)
class ServeOptions:
    quick: bool = False
    duration_s: float | None = None  # per configuration; default DURATION_S
    out_dir: Path | None = None
    models_dir: Path | None = None  # reuse exported files here (default: a temporary folder)
    model: ServedModel = ServedModel()
    configs: tuple[ServeConfig, ...] | None = None  # override the plan (tests)
    warmup: int = WARMUP_REQUESTS
    bank_size: int = 64
    rounds: int | None = None  # default ROUNDS


def _name(config: ServeConfig, options: ServeOptions) -> str:
    return "/".join(config.row_names(options.model.impl))


@dataclass
class ServeOutcome:
    paths: ReportPaths | None
    frame: object
    cores: int
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0


def run_serve_bench(options: ServeOptions, console: Console, stop: threading.Event | None = None) -> ServeOutcome:
    started = time.perf_counter()
    stop = stop or threading.Event()
    cores = physical_cores()
    configs = list(options.configs or plan(cores))
    duration = options.duration_s or DURATION_S["quick" if options.quick else "full"]
    rounds = options.rounds or ROUNDS["quick" if options.quick else "full"]
    timestamp = utc_timestamp()
    env = environment_columns(max(c.threads for c in configs), "cpu", timestamp)
    resolution_ns = timer_resolution_ns()
    measured: dict[ServeConfig, _Measured] = {}
    failures: dict[ServeConfig, str] = {}
    with tempfile.TemporaryDirectory(prefix="fusedbench-serve-") as tmp:
        models_dir = Path(options.models_dir or tmp)
        console.print(
            f"[bold]bench.serve[/]: model {options.model.shape} (d_model {options.model.d_model}, "
            f"{options.model.config.layers} layers, norms: {options.model.impl}), "
            f"{len(configs)} configurations x {duration:g} s over {rounds} "
            f"round(s), {cores} physical cores; exporting to {models_dir}"
        )
        files = export_routes(options.model, models_dir)
        bank = make_bank(options.model, options.bank_size)
        console.print("sweep started", highlight=False)
        for round_index in range(rounds):
            for i, config in enumerate(configs):
                if stop.is_set():
                    raise Stopped("stopped")
                if config in failures:
                    continue
                console.print(
                    f"  [{i + 1}/{len(configs)}] round {round_index + 1}/{rounds} {_name(config, options)}",
                    highlight=False,
                )
                try:
                    result, setup_s, served = _run_once(config, options, files, bank, duration / rounds, stop)
                except (Stopped, Interrupted, KeyboardInterrupt):
                    raise
                except Exception as error:  # one configuration that cannot run must not hide the others
                    failures[config] = f"{type(error).__name__}: {error}"
                    measured.pop(config, None)
                    continue
                measured.setdefault(config, _Measured(setup_s, served)).add(result)
    rows, samples, failure_lines = [], {}, [f"{_name(c, options)}: {why}" for c, why in failures.items()]
    for config, m in measured.items():
        row = m.row(config, options, cores, env, resolution_ns)
        if m.errors or m.mismatches:
            failure_lines.append(
                f"{_name(config, options)}: {m.mismatches} mismatches, {m.errors} errors "
                f"({'; '.join(m.messages) or 'responses differ from their references'})"
            )
        rows.append(row)
        samples[row_key(row)] = RowSamples(np.concatenate(m.latencies), np.concatenate(m.rounds))
    if not rows:
        return ServeOutcome(None, None, cores, failure_lines or ["nothing was measured"], time.perf_counter() - started)
    frame = to_frame(rows)
    paths = write_report(unique_csv(reports_dir(options.out_dir), timestamp, str(env["host"])), frame, samples)
    from bench.serve.plot import write_serve_plot

    write_serve_plot(frame, paths.plot)
    return ServeOutcome(paths, frame, cores, failure_lines, time.perf_counter() - started)


def _run_once(
    config: ServeConfig, options: ServeOptions, files, bank: Bank, duration: float, stop
) -> tuple[LoadResult, float, Served]:
    setup_started = time.perf_counter()
    with serve(config, options.model, files) as served:
        setup_s = time.perf_counter() - setup_started
        result = drive(served.call, bank, config.clients, duration_s=duration, warmup=options.warmup, stop=stop)
    if result.requests == 0:
        raise RuntimeError(
            f"no request answered in {duration:g} s ({result.errors} errors: {'; '.join(result.error_messages)})"
        )
    return result, setup_s, served


@dataclass
class _Measured:
    """One configuration's load results, accumulated over the rounds."""

    setup_s: float  # the first round's
    served: Served
    latencies: list[np.ndarray] = field(default_factory=list)
    rounds: list[np.ndarray] = field(default_factory=list)
    wall_s: float = 0.0
    other_cpu_s: float = 0.0
    mismatches: int = 0
    errors: int = 0
    messages: list[str] = field(default_factory=list)

    def add(self, result: LoadResult) -> None:
        self.rounds.append(np.full(result.requests, len(self.latencies), dtype=np.int16))
        self.latencies.append(result.latencies_us)
        self.wall_s += result.wall_s
        self.other_cpu_s += result.other_cpu_s
        self.mismatches += result.mismatches
        self.errors += result.errors
        self.messages += result.error_messages

    def row(self, config: ServeConfig, options: ServeOptions, cores: int, env: dict, resolution_ns: float) -> dict:
        latencies = np.concatenate(self.latencies)
        case = metrics.CaseInfo("serve", options.model.shape, torch.float32, math.nan)
        timing = Timing(latencies, 1, options.warmup * config.clients, self.other_cpu_s, self.wall_s)
        baseline, variant = config.row_names(options.model.impl)
        row = metrics.measurement_row(
            case,
            baseline,
            variant,
            self.served.note,
            timing,
            self.setup_s,
            resolution_ns,
            {**env, "threads": config.threads},
            len(self.latencies),
        )
        row.update(
            clients=config.clients,
            sessions=config.sessions,
            intra_op_threads=config.threads,
            inter_op_threads=self.served.inter_op_threads,
            allow_spinning=self.served.allow_spinning,
            physical_cores=cores,
            requests=len(latencies),
            # Answered requests over the summed windows of all rounds.
            requests_per_s=len(latencies) / self.wall_s,
            max_us=float(latencies.max()),
            mismatches=self.mismatches,
            errors=self.errors,
        )
        return row


def main(options: ServeOptions) -> int:
    """Run with SIGINT/SIGTERM turned into a prompt stop; print the summary; return the exit code."""
    from bench.serve.summary import print_serve_summary

    console = Console(width=None if Console().is_terminal else 200)
    stop = threading.Event()

    def on_signal(signum, _frame):
        stop.set()
        raise Interrupted(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        outcome = run_serve_bench(options, console, stop)
    except (Interrupted, Stopped, KeyboardInterrupt) as error:
        code = error.code if isinstance(error, Interrupted) else 130
        console.print(f"[red]bench.serve: {error}[/]: no report written")
        # Nothing is left to write, and the interpreter's own shutdown (torch,
        # ORT's thread pools) takes seconds here: end the process now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print_serve_summary(outcome, console)
    return 1 if outcome.failures else 0
