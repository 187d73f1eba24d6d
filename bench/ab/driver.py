"""``invoke bench --against REF``: this checkout and REF, built apart, measured interleaved in one run.

Reports from two machines measure the machines; so do two runs on one machine
minutes apart, when its neighbours or its page-fault costs drift. So both
builds are measured in one run, taking turns (asv's ``continuous``); and since
whatever differs between two processes - buffer addresses and their 4 KiB
aliasing, the cores a thread pool lands on, the allocator's state - would read
as a difference of the builds if each build ran in one process, the unit of
measurement is the process:

  1. REF is resolved to a commit and checked out into ``<build>/ab/<sha>/src``
     (bench/ab/scratch.py: a shared clone, nothing written into this repository),
     then built there by its own ``invoke build`` into ``<build>/ab/<sha>/src/build``,
     so neither build can touch the other's files. This checkout was built by
     the task. A REF that cannot take part (no worker, another protocol or
     report schema, no field for an option set here) is skipped with the
     reason (exit 0): its numbers could not be compared with this checkout's.
  2. Each build runs in PROCESSES fresh worker processes (bench/processes/worker.py,
     run from that build's tree). They come in pairs, one of each build, with
     the order of starting alternating (NEW BASE, BASE NEW, ...). A pair runs
     each job in both processes at once, taking turns on the CPU every few
     milliseconds (bench/measure/turns.py: one runs, the other waits), so the two
     sides of a row are timed in the same windows and the host's drift, which
     moves a row by 20-25 % between windows seconds apart, falls on both. (A
     REF from before turn-taking runs its jobs alternating with this
     checkout's, one after the other: job 1 NEW then BASE, job 2 BASE then NEW.)
     Each process measures one round of the whole grid; each pair gets its own
     offset of the inputs into a page (bench/measure/placement.py), recorded in
     ``processes.csv``. Setup is cached on disk by content (ONNX exports,
     Inductor's FX graph cache), so the later processes of a build start fast.
  3. Each side's processes are pooled into one report (bench/stats/pooled.py): the
     samples of process k are round k, so `invoke bench.compare` sees one unit per
     process, and pairs round k of NEW with round k of BASE. The table is
     printed, at part of the run's alpha (CONFIRM_ALPHA_SHARE).
  4. The rows it leaves INCONCLUSIVE with their estimate past a bound are
     measured again in CONFIRM_PROCESSES fresh pairs that time only those rows,
     and judged on those pairs alone with the rest of the alpha. Both tables
     are saved as ``compare.txt`` and the exit code says what they add up to.

Every request to a worker has a deadline (REQUEST_TIMEOUT_S): a hung worker is
killed and the run fails with its log, instead of hanging the run.
"""

from __future__ import annotations

import csv
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from rich.console import Console

from bench.ab import confirm, scratch
from bench.measure.allocator import FIXED_MMAP
from bench.measure.placement import PAGE_OFFSET, spread_offsets
from bench.plan.options import BenchOptions, unique_csv
from bench.processes.workdirs import RUN_SIDE, side_workdir
from bench.processes.worker import OPS_ROOT_VARIABLE, PROTOCOL
from bench.report.progress import RunProgress
from bench.report.schema import READABLE_SCHEMAS, read_report
from bench.rounds import Outcome
from bench.stats import compare, stages
from bench.stats.pooled import pool_reports
from env.files import write_text_atomic
from env.paths import REPO_ROOT, build_dir, reports_dir
from env.repo import git_commit

# Exit code when the A/B run could not be set up (bad ref, REF failed to build, a worker died or hung).
EXIT_SETUP_FAILED = 4
# Worker protocols this driver speaks (bench/processes/worker.py), and the first one that takes turns: a REF from
# before turn-taking is still measured, its jobs alternating with this checkout's one after the other.
SPOKEN_PROTOCOLS = (2, 3, 4, PROTOCOL)
TURNS_SINCE_PROTOCOL = 3
# Worker processes per build (one round each), chosen by measurement (docs/comparisons.md): a family-wise
# interval over about 30 rows needs a large t quantile at a few pairs (bench/stats/design.py tabulates it per
# number of pairs), and from 10 pairs on the comparison trims the odd pair (bench/stats/compare.py); a quick
# pair costs about 45 s here. A full run takes more pairs (its grid holds rows slower and noisier than the quick
# grid's), each as long per variant.
PROCESSES = {"quick": 10, "full": 12}
# How long each process of an A/B pair times each variant, quick and full alike. A pair's log ratio varies
# by a bias of its processes, which only more pairs average, and by the noise of its timing windows, which
# longer windows average. Starting a process and setting up its grid
# costs about 10 s, far more than 37 variants' windows, so longer windows are cheap: at 42 ms (the quick budget
# over 6 processes) the fused op's rows spread 0.02-0.07 between pairs, at 125 ms 0.013-0.016.
PROCESS_BUDGET_S = 0.125
# The run's family-wise alpha is spent in two stages. The first judges every row on the pairs above. A row it
# leaves INCONCLUSIVE with its estimate past a bound (its interval reaching below 1: at 10 pairs, trimmed to 8,
# and 1 - 0.04/32 per row, Yuen's t is large) is measured again in fresh pairs of processes, only its own rows, and
# judged on those pairs alone, over a family of the suspects. The stages' data
# are independent, so the two alphas add up to the run's. A run with no suspect (identical code, mostly)
# has no second stage. Every suspect is measured again, the noisiest too: with only the suspect rows timed,
# a pair costs about 4 s and each suspect 1-5 s more (a compiled one compiles again in every process), so
# skipping one saves less than a missed slowdown costs (a 10 % run missed its fused call at 1x8x512 when a
# rule skipped it as too noisy).
# 20 pairs, since a pair is cheap and the family can be large: an interval's half-width is Yuen's t times
# its standard error, and both fall with the pairs kept (bench/stats/design.py: 12 pairs keep 10, 20 keep 16).
# Seven suspects at 12 pairs left a 10 % slowdown of the allocating call at 4 MiB, 1.081 [1.037, 1.128],
# short of the 1.05 the verdict then asked for.
CONFIRM_ALPHA_SHARE = stages.CONFIRM_ALPHA_SHARE
CONFIRM_PROCESSES = 20
CONFIRM_BUDGET_S = 0.25  # per variant and process: a suspect's grid is a few rows, so its windows can be long
# The worker module, this tree's first; a REF from before bench/ was grouped by stage has it at the second.
WORKER_MODULES = ("bench.processes.worker", "bench.ab_worker")
WORKER = "bench/processes/worker.py"
OPS_PACKAGE = "ops/__init__.py"  # what a REF needs to be measured by this checkout's harness
# Longest a worker may take to answer one request (one job of the full grid takes seconds to a minute;
# its first job in a process may compile). Past it, the worker is taken as hung.
REQUEST_TIMEOUT_S = 900.0


class AbError(RuntimeError):
    """The A/B run could not be set up or a worker failed; the message says what to do."""


class Skipped(Exception):
    """REF cannot take part in an A/B run (the message says why)."""


# Whose bench code measures REF: its own (the checkouts compared whole, harness and all: `bench --against`) or
# this checkout's (HARNESS_HEAD: only the op's code and build differ between the sides: the gate).
HARNESS_OWN, HARNESS_HEAD = "own", "head"


@dataclass(frozen=True)
class Tree:
    """A source tree and the build folder its libraries are in (None: whatever its own environment says).

    ``ops``: the tree whose ``ops`` package the worker imports, when that is not ``root`` (a side measured
    by another tree's harness: see run_ab's ``harness``).
    """

    root: Path
    build: Path | None = None
    ops: Path | None = None


class HarnessMismatch(Skipped):
    """REF's ops package or libraries lack what this checkout's harness calls (the message names it)."""


def resolve(ref: str, repo: Path = REPO_ROOT) -> str:
    """REF -> the full hash of the commit it names (clear error for anything else)."""
    if not ref or ref.startswith("-"):
        raise AbError(f"--against must name a commit (a branch, tag, hash, HEAD~1, ...), got {ref!r}")
    try:
        return scratch.git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", cwd=repo)
    except scratch.ScratchError:
        raise AbError(
            f"--against {ref!r} is not a commit of {repo} - check the name, or `git fetch` it first"
        ) from None


def ref_build_dir(src: Path) -> Path:
    """REF's build folder: inside its checkout, where a checkout's own build is. ccache's base directory is the tree
    being built (env/builder/compiler_cache.py), so REF's compiler commands then read as this checkout's do, and a
    source REF shares with it is a cache hit (the kernel core: a minute of one core each time REF is built)."""
    return src / "build"


def build_ref(src: Path, build: Path, log: Path, console: Console) -> None:
    """REF's own `invoke build`, into its own build folder (reused when its record is there); output to ``log``."""
    console.print(f"building BASE in {src} (its own `invoke build`, into {build}; log {log})", highlight=False)
    started = time.perf_counter()
    try:
        scratch.build(src, build, log)
    except scratch.ScratchError as error:
        raise AbError(str(error)) from None
    console.print(f"BASE built in {time.perf_counter() - started:.0f} s", highlight=False)


def worker_module(tree: Path) -> str | None:
    """The module a tree's A/B worker runs as (WORKER_MODULES); None for a tree from before A/B runs."""
    for module in WORKER_MODULES:
        if (tree / (module.replace(".", "/") + ".py")).is_file():
            return module
    return None


class Worker:
    """One worker process of one build (bench/processes/worker.py), driven request by request, each with a deadline."""

    def __init__(
        self,
        label: str,
        tree: Path,
        build: Path | None,
        log: Path,
        command: list[str] | None = None,
        timeout_s: float = REQUEST_TIMEOUT_S,
        ops: Path | None = None,
    ) -> None:
        self.label, self.log, self.timeout_s = label, log, timeout_s
        self.paused = False
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(log, "w")
        env = scratch.side_env(build)
        if ops is not None:
            env[OPS_ROOT_VARIABLE] = str(ops)
        self.process = subprocess.Popen(
            command or [sys.executable, "-m", worker_module(tree)],
            cwd=tree,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            text=True,
        )
        # A reader thread, so a reply can be waited for with a deadline (a bare readline would wait forever).
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.hello = self._read("hello")

    def _pump(self) -> None:
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put("")  # end of output: the process exited

    def _tail(self) -> str:
        self._log_file.flush()
        return "".join(self.log.read_text(errors="replace").splitlines(keepends=True)[-15:])

    def _read(self, what: str) -> dict:
        try:
            line = self._lines.get(timeout=self.timeout_s)
        except queue.Empty:
            self.process.kill()
            self.process.wait()
            raise AbError(
                f"the {self.label} worker did not answer {what!r} within {self.timeout_s:g} s and was stopped; "
                f"last lines of {self.log}:\n{self._tail()}"
            ) from None
        if not line:
            self.process.wait()
            raise AbError(
                f"the {self.label} worker exited (code {self.process.returncode}); "
                f"last lines of {self.log}:\n{self._tail()}"
            )
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            raise AbError(
                f"the {self.label} worker answered {line.strip()[:200]!r}, not a JSON line (its log: {self.log})"
            ) from None

    def send(self, request: dict) -> None:
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except OSError:
            pass  # it exited: receive reports how

    def receive(self, what: str) -> dict:
        """The next reply, to a request for ``what``; a reply carrying "error" raises AbError."""
        reply = self._read(what)
        if "lacks" in reply:
            raise HarnessMismatch(f"the {self.label} side lacks what this checkout's harness calls: {reply['lacks']}")
        if "error" in reply:
            raise AbError(f"the {self.label} worker failed on {what!r}: {reply['error']} (traceback in {self.log})")
        return reply

    def ask(self, request: dict) -> dict:
        self.send(request)
        return self.receive(request["do"])

    def pause(self) -> None:
        """Stop every thread of the worker (SIGSTOP) while another takes its turn: see run_job_in_turns."""
        if self.process.poll() is None and not self.paused:
            os.kill(self.process.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            if self.process.poll() is None:
                os.kill(self.process.pid, signal.SIGCONT)

    def close(self) -> None:
        self.resume()  # a stopped worker reads no "quit"
        if self.process.poll() is None:
            try:
                self.process.stdin.write(json.dumps({"do": "quit"}) + "\n")
                self.process.stdin.flush()
                self.process.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self._log_file.close()


StartWorker = Callable[[str, Tree, Path], Worker]


def takes_turns(workers: list[Worker]) -> bool:
    """Whether every worker can take turns (bench/measure/turns.py); a REF from before turn-taking cannot."""
    return all(worker.hello.get("protocol", 0) >= TURNS_SINCE_PROTOCOL for worker in workers)


def run_job_in_turns(
    workers: list[Worker], job: int, round_index: int = 0, stop_waiting: bool = True
) -> dict[str, dict]:
    """Job ``job`` in every worker at once, one worker running at a time, in turns; each worker's job reply.

    Every worker is sent the job at once, does its untimed start and waits for
    its first turn (a worker that times nothing answers at once); the turn goes
    to the workers in the given order, and from then on to the next waiting
    one whenever the running one hands it back. A worker that answers its job
    leaves the rotation; the last one keeps the turn to itself.

    A waiting worker is stopped (SIGSTOP) until its next turn (``stop_waiting``
    False leaves it running, for bench/experiments/ab_spread.py's comparison). Its main thread
    only waits, but its thread pools do not: OpenMP's and ONNX Runtime's idle
    threads spin for milliseconds after their last parallel region before they
    sleep, and on 2 cores a spinning thread of the waiting build takes the core
    the running build's second thread needs. Measured before the workers were
    stopped: the rows with two threads (8x128x1024, the model) spread 0.3-1.1 in
    log ratio between the builds, twice as much as without turns, while the
    single-thread rows fell from 0.15-0.4 to 0.02-0.03.
    """
    request = {"do": "job", "round": round_index, "index": job, "turns": True}
    for worker in workers:  # all at once: each does the job's untimed start (bench/measure/turns.py) beside the others
        worker.send(request)
    waiting: deque[Worker] = deque()
    replies = {}
    for worker in workers:
        reply = worker.receive("job")
        if reply.get("turn") == "waiting":
            waiting.append(worker)
        else:  # it timed nothing (every variant skipped or failed before its first turn): done, no turns
            replies[worker.label] = _job_reply(reply, worker)
    pause = (lambda worker: worker.pause()) if stop_waiting else (lambda worker: None)
    try:
        for worker in waiting:
            pause(worker)
        while waiting:
            worker = waiting.popleft()
            worker.resume()
            worker.send({"do": "go"})
            reply = worker.receive("job")
            if reply.get("turn") == "waiting":
                if waiting:
                    pause(worker)
                waiting.append(worker)
            else:
                replies[worker.label] = _job_reply(reply, worker)
    finally:
        for worker in workers:
            worker.resume()
    return replies


def _job_reply(reply: dict, worker: Worker) -> dict:
    if "seconds" not in reply:
        raise AbError(f"the {worker.label} worker answered its job with neither a turn nor its seconds: {reply}")
    return reply


def _start(label: str, tree: Tree, log: Path) -> Worker:
    return Worker(label, tree.root, tree.build, log, ops=tree.ops)


def check_compatible(hello: dict, sha: str) -> None:
    """Raise Skipped when REF's worker cannot be driven or its report could not be compared."""
    if hello.get("protocol") not in SPOKEN_PROTOCOLS:
        raise Skipped(
            f"REF {sha[:12]}'s A/B worker speaks protocol {hello.get('protocol')}, this checkout "
            + " or ".join(map(str, SPOKEN_PROTOCOLS))
        )
    if hello.get("schema_version") not in READABLE_SCHEMAS:
        raise Skipped(
            f"REF {sha[:12]} writes report schema {hello.get('schema_version')}, this checkout reads "
            f"{', '.join(map(str, READABLE_SCHEMAS))}: "
            "its rows have other columns, so the two reports cannot be compared"
        )


# What a side from before an option behaved as, where that differs from the option's default: a worker
# without ``allocator`` always fixed the mmap threshold; one without ``layouts`` placed every op case's x at
# the process's page offset.
BEFORE_OPTION = {"allocator": FIXED_MMAP, "layouts": PAGE_OFFSET}


def common_layouts(options: BenchOptions, fields) -> BenchOptions:
    """``options`` with only the layouts every side can measure: a side from before the layouts option
    measured the page offset alone, so a run of every layout measures that one on both sides."""
    if options.layouts == "all" and any("layouts" not in known for known in fields):
        return replace(options, layouts=PAGE_OFFSET)
    return options


def plan_for(options: BenchOptions, known: list[str], label: str) -> dict:
    """The options a side's worker is sent: only the fields its BenchOptions has.

    A field it lacks is dropped when it holds what the side did before that
    option existed (its default, or BEFORE_OPTION's value); set to anything else, the side cannot measure
    what was asked, and the run is skipped naming the option.
    """
    defaults = BenchOptions()
    plan = {}
    for name, value in asdict(options).items():
        if name == "out_dir":
            continue
        if name in known:
            plan[name] = value
        elif value != BEFORE_OPTION.get(name, getattr(defaults, name)):
            raise Skipped(
                f"{label}'s bench has no option {name!r} (set to {value!r} here), so it cannot measure the same grid"
            )
    return plan


@dataclass(frozen=True)
class Measured:
    """Per side label: the pooled report, and every process's skipped rows and failures."""

    csv: dict[str, Path | None]
    failures: dict[str, list[str]]
    skipped: dict[str, list[str]]


def measure_processes(
    sides: dict[str, Tree],
    options: BenchOptions,
    processes: int,
    folder: Path,
    console: Console,
    start: StartWorker = _start,
    process_budget_s: float | None = None,
    cache: Path | None = None,
    progress: RunProgress | None = None,
) -> Measured:
    """Measure each side in ``processes`` fresh processes, in pairs, alternating; pool each side's reports.

    ``sides`` maps a label to its tree (one side: a plain run over several
    processes; two: an A/B run). Process k of every side gets the same page
    offset, so a pair differs only in its build. ``process_budget_s``: see
    :func:`per_process`. ``cache``: where each side's setup is cached (a folder
    per side; default under ``folder``, removed at the end; given, the caller
    removes it). ``progress``: told of every job of every process (bench/report/progress.py).
    """
    cache_root = cache or folder
    labels = list(sides)
    options = per_process(options, processes, process_budget_s)
    offsets = spread_offsets(processes)
    reports: dict[str, list[Path]] = {label: [] for label in labels}
    failures: dict[str, list[str]] = {label: [] for label in labels}
    skipped: dict[str, list[str]] = {label: [] for label in labels}
    log_rows = []
    for index in range(processes):
        order = labels if index % 2 == 0 else labels[::-1]
        workers: list[Worker] = []
        try:
            for label in order:
                workers.append(start(label, sides[label], folder / label.lower() / f"process{index}.log"))
            jobs = None
            labels_of_jobs: list[str] = []
            pids = {}
            # Every worker is asked before any answer is read, so the sides import and set up at once (nothing
            # is timed yet): on 2 cores that halves the untimed part of a pair.
            for worker in workers:
                worker.send({"do": "fields"})
            fields = {worker.label: worker.receive("fields")["options"] for worker in workers}
            side_options = common_layouts(options, fields.values())
            for worker in workers:
                plan = plan_for(side_options, fields[worker.label], worker.label)
                workdir = side_workdir(cache_root, worker.label)
                worker.send({"do": "plan", "options": plan, "page_offset": offsets[index], "workdir": str(workdir)})
            for worker in workers:
                reply = worker.receive("plan")
                if jobs is not None and reply["jobs"] != jobs:
                    raise AbError(
                        f"the sides plan different grids ({jobs} and {reply['jobs']} jobs): their options differ"
                    )
                jobs, pids[worker.label] = reply["jobs"], reply.get("pid")
                labels_of_jobs = reply.get("labels") or [f"job {j + 1}" for j in range(jobs)]
            if progress is not None:
                progress.set_total(processes * (jobs or 0))
            seconds = dict.fromkeys(labels, 0.0)
            handoffs = dict.fromkeys(labels, 0)
            in_turns = len(workers) > 1 and takes_turns(workers)
            for job in range(jobs or 0):
                if progress is not None:
                    progress.start_job(f"process {index + 1}/{processes}: {labels_of_jobs[job]}")
                job_order = workers if job % 2 == 0 else workers[::-1]
                if in_turns:
                    replies = run_job_in_turns(job_order, job)
                else:
                    replies = {w.label: w.ask({"do": "job", "round": 0, "index": job}) for w in job_order}
                for label, reply in replies.items():
                    seconds[label] += reply["seconds"]
                    handoffs[label] += reply.get("handoffs", 0)
                if progress is not None:
                    progress.finish_job(
                        f"process {index + 1}/{processes}: {labels_of_jobs[job]}",
                        sum(reply["seconds"] for reply in replies.values()),
                    )
            for worker in workers:
                worker.send({"do": "record", "out_dir": str(folder / worker.label.lower() / f"process{index}")})
            for worker in workers:
                record = worker.receive("record")
                failures[worker.label] += record["failures"]
                skipped[worker.label] += record["skipped"]
                if record["csv"] is not None:
                    reports[worker.label].append(Path(record["csv"]))
                log_rows.append(
                    {
                        "side": worker.label,
                        "process": index,
                        "pid": pids.get(worker.label),
                        "started": order.index(worker.label),
                        "page_offset": offsets[index],
                        "seconds": round(seconds[worker.label], 2),
                        "turns_handed_over": handoffs[worker.label],
                    }
                )
        finally:
            for worker in workers:
                worker.close()
        console.print(
            f"process pair {index + 1}/{processes} (page offset {offsets[index]}): "
            + ", ".join(f"{label} {seconds[label]:.0f} s" for label in order),
            highlight=False,
        )
    _write_process_log(folder / "processes.csv", log_rows)
    for label in labels if cache is None else ():
        shutil.rmtree(folder / label.lower() / "cache", ignore_errors=True)  # setup cached for this run only
    csvs = {}
    for label in labels:
        complete = len(reports[label]) == processes
        csvs[label] = pool_reports(reports[label], folder / label.lower() / "pooled.csv") if complete else None
    return Measured(
        csvs,
        {k: list(dict.fromkeys(v)) for k, v in failures.items()},
        {k: list(dict.fromkeys(v)) for k, v in skipped.items()},
    )


def per_process(options: BenchOptions, processes: int, process_budget_s: float | None = None) -> BenchOptions:
    """The options of one of ``processes`` processes that each measure one round of the grid.

    Each takes 1/processes of every variant's budget and of its minimum samples (its round of ``processes``).
    ``process_budget_s`` sets that share instead (seconds per variant and process); an explicit
    ``options.budget_s`` stays the whole run's budget, shared out.
    """
    options = replace(options, rounds=processes)
    if process_budget_s is not None and options.budget_s is None:
        options = replace(options, budget_s=process_budget_s * processes)
    return options


def _write_process_log(path: Path, rows: list[dict]) -> None:
    """One line per process: its side, index, pid, start order in its pair, page offset and measuring time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(
            handle, fieldnames=["side", "process", "pid", "started", "page_offset", "seconds", "turns_handed_over"]
        )
        writer.writeheader()
        writer.writerows(rows)


@dataclass(frozen=True)
class AbResult:
    code: int
    folder: Path | None = None
    new_csv: Path | None = None
    base_csv: Path | None = None
    skipped: str = ""
    comparison: compare.Comparison | None = None  # both stages' verdicts (see run_ab)


def run_ab(
    ref: str,
    options: BenchOptions,
    console: Console,
    threshold: float = compare.DEFAULT_THRESHOLD,
    alpha: float = compare.DEFAULT_ALPHA,
    new: Tree | None = None,
    processes: int | None = None,
    ref_cache: Path | None = None,
    start: StartWorker = _start,
    harness: str = HARNESS_OWN,
) -> AbResult:
    """Build REF beside NEW (default: this checkout, already built), measure both in alternating processes, compare.

    ``ref_cache``: where REF's checkout and build live (default ``<NEW's build>/ab``).
    ``harness``: HARNESS_OWN runs REF's worker in REF's tree (its bench code measures it); HARNESS_HEAD runs
    NEW's bench code for both sides, REF's side importing REF's ``ops`` and loading REF's libraries, so a change
    of the harness alone moves no row. When REF's ops or libraries lack what NEW's harness calls, the run says
    what and falls back to REF's own harness. See the module docstring for the rest.
    """
    if harness not in (HARNESS_OWN, HARNESS_HEAD):
        raise AbError(f"harness must be {HARNESS_OWN!r} or {HARNESS_HEAD!r}, got {harness!r}")
    new = new or Tree(REPO_ROOT)
    # Both builds under one malloc policy, the fixed one: it makes an allocating row alike in every process
    # (bench/measure/allocator.py), and a REF from before the policy option fixes it whatever it is asked.
    options = replace(options, allocator=FIXED_MMAP)
    processes = processes or PROCESSES[options.mode]
    if processes < 2:
        raise AbError(f"an A/B run needs at least 2 processes per side (an interval needs 2 units), got {processes}")
    sha = resolve(ref, new.root)
    root = (ref_cache or (new.build or build_dir()) / "ab") / sha
    try:
        src = scratch.checkout(sha, root / "src", new.root)
    except scratch.ScratchError as error:
        raise AbError(str(error)) from None
    new_commit = git_commit(new.root)
    console.print(
        f"[bold]A/B[/]: NEW = {new.root} ({new_commit}), BASE = {ref} ({sha}), {processes} processes per side",
        highlight=False,
    )
    folder = reports_dir(options.out_dir) / "ab" / f"{_timestamp()}-{new_commit[:12]}-vs-{sha[:12]}"
    folder.mkdir(parents=True, exist_ok=True)
    if harness == HARNESS_HEAD and not (src / OPS_PACKAGE).is_file():
        console.print(f"[yellow]BASE has no {OPS_PACKAGE}[/]: measured by its own harness", highlight=False)
        harness = HARNESS_OWN
    if harness == HARNESS_OWN and (skipped := _own_worker_refused(src, root, sha, folder)):
        return _skip(skipped, console, folder)
    build_ref(src, ref_build_dir(src), root / "build.log", console)
    own = Tree(src, ref_build_dir(src))
    if harness == HARNESS_HEAD:
        # NEW's bench code in both workers; REF's side imports REF's ops, which loads REF's libraries.
        console.print(f"both sides measured by NEW's harness ({new.root / 'bench'})", highlight=False)
        sides = {"NEW": new, "BASE": Tree(new.root, ref_build_dir(src), ops=src)}
        try:
            return measure_and_judge(sides, options, processes, folder, console, threshold, alpha, start)
        except HarnessMismatch as mismatch:
            console.print(f"[yellow bold]{mismatch}[/]: measuring BASE by its own harness instead", highlight=False)
            write_text_atomic(folder / "harness.txt", f"{mismatch}; BASE measured by its own harness\n")
            if skipped := _own_worker_refused(src, root, sha, folder):
                return _skip(skipped, console, folder)
        except Skipped as reason:
            return _skip(str(reason), console, folder)
    try:
        return measure_and_judge(
            {"NEW": new, "BASE": own}, options, processes, folder, console, threshold, alpha, start
        )
    except Skipped as reason:
        return _skip(str(reason), console, folder)


def _own_worker_refused(src: Path, root: Path, sha: str, folder: Path) -> str:
    """Why REF's own worker cannot measure it ("" when it can); asked before anything is built (its hello
    loads no library)."""
    if worker_module(src) is None:
        return f"REF {sha[:12]} predates A/B runs (it has no {WORKER})"
    probe = Worker("BASE", src, ref_build_dir(src), folder / "base" / "hello.log")
    try:
        check_compatible(probe.hello, sha)
    except Skipped as reason:
        return str(reason)
    finally:
        probe.close()
    return ""


def measure_and_judge(
    sides: dict[str, Tree],
    options: BenchOptions,
    processes: int,
    folder: Path,
    console: Console,
    threshold: float,
    alpha: float,
    start: StartWorker = _start,
) -> AbResult:
    """Both stages of an A/B run of built trees NEW and BASE (see CONFIRM_ALPHA_SHARE), judged and saved."""
    # One setup cache for both stages: the second's first pair need not export or compile again.
    with tempfile.TemporaryDirectory(prefix="fusedbench-ab-cache-") as cache_dir:
        return _two_stages(sides, options, processes, folder, console, threshold, alpha, start, Path(cache_dir))


def _two_stages(sides, options, processes, folder, console, threshold, alpha, start, cache: Path) -> AbResult:
    started = time.perf_counter()
    measured = measure_processes(sides, options, processes, folder, console, start, PROCESS_BUDGET_S, cache)
    console.print(f"measured in {time.perf_counter() - started:.0f} s", highlight=False)
    # Printed as usual and recorded, to save the same tables.
    recorder = Console(record=True, file=console.file, width=console.width, force_terminal=console.is_terminal)
    first_alpha = alpha * (1 - CONFIRM_ALPHA_SHARE)
    comparison = _judge(measured, folder, recorder, threshold, first_alpha)
    second_alpha = alpha * CONFIRM_ALPHA_SHARE
    suspects = compare.suspects(comparison, threshold) if not comparison.machine_differences else []
    if suspects:
        recorder.print(
            f"confirming {len(suspects)} INCONCLUSIVE row(s) whose estimate lies past a bound, in "
            f"{CONFIRM_PROCESSES} fresh pairs of processes: {confirm.describe(suspects)}",
            highlight=False,
        )
        started = time.perf_counter()
        again = _measure_again(sides, options, suspects, folder / "confirm", recorder, start, cache)
        if again is not None:
            recorder.print(f"measured again in {time.perf_counter() - started:.0f} s", highlight=False)
            second = _judge(again, folder / "confirm", recorder, threshold, second_alpha, suspects)
            comparison = compare.with_confirmed(comparison, second)
            measured = replace(measured, failures={k: v + again.failures[k] for k, v in measured.failures.items()})
    code = _verdict(comparison, recorder, alpha, first_alpha)
    text = recorder.export_text()
    new_csv, base_csv = measured.csv["NEW"], measured.csv["BASE"]
    saved = write_text_atomic(folder / "compare.txt", f"BASE {base_csv}\nNEW  {new_csv}\n\n{text}")
    console.print(f"reports  BASE {base_csv}\n         NEW  {new_csv}\ncompare  {saved}", highlight=False)
    if measured.failures["NEW"] and code == compare.EXIT_OK:
        code = compare.EXIT_REGRESSION  # a wrong output is a failure, as in a plain run
    return AbResult(code, folder, new_csv, base_csv, comparison=comparison)


def _measure_again(
    sides: dict[str, Tree],
    options: BenchOptions,
    suspects: list[compare.Key],
    folder: Path,
    console: Console,
    start: StartWorker,
    cache: Path,
) -> Measured | None:
    """The suspects' jobs in CONFIRM_PROCESSES fresh pairs; None (said why) when REF cannot measure them."""
    narrowed = confirm.confirm_options(options, suspects)
    # A REF from before row lists measures the suspects' whole jobs and their limits, one from before job lists
    # the whole product of the suspects' cases: slower, as valid.
    jobs_only = replace(narrowed, rows=None)
    for attempt in (narrowed, jobs_only, replace(jobs_only, jobs=None)):
        try:
            return measure_processes(sides, attempt, CONFIRM_PROCESSES, folder, console, start, CONFIRM_BUDGET_S, cache)
        except Skipped as reason:
            refused = reason
    console.print(f"[yellow]not measured again[/]: {refused}; the first stage's verdicts stand", highlight=False)
    return None


def _judge(
    measured: Measured,
    folder: Path,
    console: Console,
    threshold: float,
    alpha: float,
    only: list[compare.Key] | None = None,
) -> compare.Comparison:
    """One stage's pooled reports compared paired (``only``: just these rows, the family ``alpha`` covers)."""
    for label in measured.csv:
        for line in measured.skipped[label]:
            console.print(f"[yellow]{label} skipped[/] {line}", highlight=False)
        for line in measured.failures[label]:
            console.print(f"[red bold]{label} FAILED[/] {line}", highlight=False)
    new_csv, base_csv = measured.csv["NEW"], measured.csv["BASE"]
    if new_csv is None or base_csv is None:
        raise AbError(f"a side measured nothing in some process (see the logs under {folder})")
    try:
        comparison = compare.compare_reports(base_csv, new_csv, threshold, alpha, paired=True, only=only)
    except (compare.ReportError, ValueError) as error:
        raise AbError(f"the pooled reports under {folder} cannot be compared: {error}") from None
    title = "confirmation: the suspect rows in fresh pairs, judged on them alone" if only else ""
    # Both sides ran on this machine at once: a REF of an earlier schema lacks facts, not a machine.
    compare.print_comparison(comparison, threshold, alpha, console, title=title, summary=False, force=True)
    return comparison


def rejudge_folder(folder: Path, threshold: float, alpha: float = compare.DEFAULT_ALPHA) -> compare.Comparison:
    """A finished run's verdicts judged again from its pooled reports by this checkout's rules, both stages."""
    return stages.judge_folder(folder, threshold, alpha, CONFIRM_ALPHA_SHARE).comparison


def _verdict(comparison: compare.Comparison, console: Console, alpha: float, first: float) -> int:
    """The run's exit code from both stages' verdicts, with one line saying what they add up to."""
    if comparison.machine_differences:
        return compare.EXIT_MACHINES_DIFFER
    confirmed = [r for r in comparison.rows if r.confirmed]
    stages = (
        f"{100 * (1 - alpha):g}% family-wise over both stages ({100 * (1 - first):g}% on every row, "
        f"{100 * (1 - alpha + first):g}% on the {len(confirmed)} row(s) measured again)"
        if confirmed
        else f"{100 * (1 - first):g}% family-wise; no row measured again"
    )
    return compare.print_summary(comparison, console, note=stages)


def _skip(reason: str, console: Console, folder: Path | None = None) -> AbResult:
    console.print(f"[yellow bold]A/B skipped[/]: {reason}; nothing was compared", highlight=False)
    if folder is not None:
        write_text_atomic(folder / "compare.txt", f"A/B skipped: {reason}\n")
    return AbResult(compare.EXIT_OK, folder=folder, skipped=reason)


def _timestamp() -> str:
    from bench.measure.environment import utc_timestamp

    return utc_timestamp()


def run_in_processes(
    options: BenchOptions, processes: int, verbose: bool = False, setup_cache: Path | None = None
) -> int:
    """A plain run of this checkout in ``processes`` fresh processes, pooled into one report; prints the summary.

    ``setup_cache``: the folder whose ``run_workdir`` (bench/processes/workdirs.py) the processes share (the
    caller may have filled it ahead of them: bench/plan/warm_exports.py); default one of their own. Returns 1 when a
    baseline failed (as a plain run does), else 0.
    """
    from bench.report.plot import write_plot
    from bench.report.schema import ReportPaths
    from bench.report.summary import print_summary

    console = Console(width=None if Console().is_terminal else 200)
    started = time.perf_counter()
    console.print(
        f"[bold]fusedbench[/] {options.mode} run in {processes} fresh processes (one round each)", highlight=False
    )
    with tempfile.TemporaryDirectory(prefix="fusedbench-processes-") as tmp:
        try:
            with RunProgress(console) as progress:
                measured = measure_processes(
                    {RUN_SIDE: Tree(REPO_ROOT)},
                    options,
                    processes,
                    Path(tmp),
                    console,
                    cache=setup_cache,
                    progress=progress,
                )
        except (AbError, Skipped) as error:
            console.print(f"[red bold]bench: {error}[/]", highlight=False)
            return 1
        paths = None
        frame = None
        if measured.csv[RUN_SIDE] is not None:
            pooled = ReportPaths.for_csv(measured.csv[RUN_SIDE])
            frame = read_report(pooled.csv)
            target = unique_csv(reports_dir(options.out_dir), str(frame.timestamp_utc.iloc[0]), str(frame.host.iloc[0]))
            paths = ReportPaths.for_csv(target)
            paths.csv.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(pooled.samples, paths.samples)  # the sidecar first: a reader that finds the CSV finds it
            shutil.copyfile(pooled.csv, paths.csv)
            write_plot(frame, paths.plot)
    failures = measured.failures[RUN_SIDE] or ([] if paths else ["nothing was measured"])
    outcome = Outcome(paths, frame, failures, measured.skipped[RUN_SIDE], time.perf_counter() - started)
    print_summary(outcome, console, verbose)
    return 1 if outcome.failures else 0


def main(ref: str, options: BenchOptions, threshold: float = compare.DEFAULT_THRESHOLD) -> int:
    """Run the A/B comparison, print the table; return compare's exit code (EXIT_SETUP_FAILED on a setup error)."""
    console = Console(width=None if Console().is_terminal else 200)
    try:
        return run_ab(ref, options, console, threshold=threshold).code
    except AbError as error:
        console.print(f"[red bold]bench --against: {error}[/]", highlight=False)
        return EXIT_SETUP_FAILED
