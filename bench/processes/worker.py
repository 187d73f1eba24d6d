"""One process of one build's side of a multi-process or A/B run: runs this tree's benchmark job by job, on request.

Started as ``python -m bench.processes.worker`` with this tree as the working
directory, so it imports this tree's code and (through its build record) this
tree's libraries. It speaks JSON lines: requests on stdin, one reply per
request on the original stdout; everything else the benchmark prints goes to
stderr (the process's log). The requests are the three steps of bench/run.py,
the second one job at a time so the driver can alternate the two builds job by
job:

  {"do": "fields"}                                   -> {"options": [BenchOptions field names]}
  {"do": "plan", "options": {...}, "page_offset": b, "workdir": d} -> {"jobs": N, "rounds": R, "pid": p,
                                                                      "labels": [the N jobs' labels]}
  {"do": "job", "round": r, "index": j}              -> {"seconds": s}
  {"do": "job", "round": r, "index": j, "turns": true}
      -> {"turn": "waiting"} once its untimed start is done (bench/measure/turns.py), then after each {"do": "go"}
         either {"turn": "waiting"} (its turn is over) or the job's reply {"seconds": s}; a job that times
         nothing (every variant skipped or failed before timing) answers {"seconds": s} at once
  {"do": "record", "out_dir": "..."}                 -> {"csv": path or null, "failures": [...], "skipped": [...]}
  {"do": "where"}  -> {"bench": f, "env": f, "ops": f, "torch_library": f, "ort_library": f, "commit": c}: the
                      files this process measures with (its harness) and measures (the op's package and libraries)
  {"do": "quit"}

With OPS_ROOT_VARIABLE set to another tree, the worker is that tree's side
measured by this tree's harness (bench/ab/driver.py, ``harness="head"``): the
``ops`` package is imported from there, its libraries come from the build that
FUSEDBENCH_BUILD_DIR names (that tree's), and its report's commit is that
tree's; ``bench`` and ``env`` stay this tree's.

The first line it writes, before any request, says who it is: the protocol
version, the report schema version and the commit. A reply carrying "error" is
a failure of that request (the message says what went wrong). ``page_offset``
places the inputs that many bytes into a page
(bench/measure/placement.py); ``workdir`` is where setup is cached on disk (default: a
temporary folder).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import TextIO

from bench.measure.turns import Turns

# Bump when a request or reply changes: the driver skips a build that speaks a version it does not know.
# 3 added turn-taking ("turns" in a job request); 4 waits for the first turn after the job's untimed start,
# and a job that times nothing answers without waiting (a driver of 3 would call that a broken worker);
# 5 added "where", and a plan that fails on what the measured ops lack says so ("lacks").
PROTOCOL = 5
# The folder holding the ``ops`` package this worker measures, when it is not this tree's (see above).
OPS_ROOT_VARIABLE = "FUSEDBENCH_OPS_ROOT"


def ops_root() -> Path | None:
    where = os.environ.get(OPS_ROOT_VARIABLE)
    return Path(where).resolve() if where else None


class _OpsFrom(importlib.abc.MetaPathFinder):
    """Finds the top-level ``ops`` in one folder, ahead of sys.path (whose first entry is this tree);
    its submodules follow from the package's own path."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)

    def find_spec(self, name, path=None, target=None):
        if name != "ops":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, [self.root])
        if spec is None:
            raise ImportError(f"{OPS_ROOT_VARIABLE} names {self.root}, which holds no ops package")
        return spec


class _Side:
    """The state of one run between requests: its jobs, settings, results and scratch folder."""

    def __init__(self, options: dict, page_offset: int = 0, workdir: str | None = None) -> None:
        from bench.measure.allocator import DEFAULT, set_malloc_policy

        set_malloc_policy(options.get("allocator", DEFAULT))  # before the cases allocate: bench/measure/allocator.py
        import torch

        from bench.measure.environment import environment_columns, utc_timestamp
        from bench.measure.placement import set_page_offset
        from bench.measure.verify import CaseReferences
        from bench.plan.jobs import plan_jobs
        from bench.plan.options import BenchOptions, default_threads
        from bench.rounds import Results, run_settings

        for name in ("op_shapes", "add_norm_shapes"):  # JSON brings them as lists
            if options.get(name) is not None:
                options[name] = tuple(tuple(s) for s in options[name])
        for name in ("jobs", "rows"):
            if options.get(name) is not None:
                options[name] = tuple(options[name])
        if options.get("model_batches") is not None:
            options["model_batches"] = tuple(tuple(b) for b in options["model_batches"])
        self.options = BenchOptions(**options)
        set_page_offset(page_offset)
        self.started = time.perf_counter()
        threads = self.options.threads or default_threads()
        torch.set_num_threads(threads)
        self.settings = run_settings(self.options)
        self.env = environment_columns(threads, "cpu", utc_timestamp(), self.settings.config.precision)
        if ops_root() is not None:  # the report names the code it measured, not the harness's tree
            from env.repo import git_commit

            self.env["git_commit"] = git_commit(ops_root())
        # The workdir holds the setup that is cached on disk (ONNX exports, Inductor's FX graph cache): the
        # driver gives every process of one build the same one, so the later processes find it there.
        self.scratch = None if workdir else tempfile.TemporaryDirectory(prefix="fusedbench-ab-")
        self.workdir = Path(workdir) if workdir else Path(self.scratch.name)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.jobs = plan_jobs(self.options, self.workdir)
        self.results = Results()
        self.references = CaseReferences()  # a case's prepared reference, shared by its jobs across job() calls

    def job(self, round_index: int, index: int, turns=None) -> dict:
        """Run job ``index``; with ``turns`` (bench/measure/turns.py), only in this process's turns."""
        from bench.measure import turns as bench_turns
        from bench.rounds import run_round

        if not 0 <= index < len(self.jobs):
            raise ValueError(f"job index must be in [0, {len(self.jobs)}), got {index}")
        started = time.perf_counter()
        bench_turns.use(turns)
        try:
            run_round(
                [self.jobs[index]],
                round_index,
                self.settings,
                self.results,
                lambda job: print(f"round {round_index + 1}: {job.label}", file=sys.stderr, flush=True),
                self.references,
            )
        finally:
            bench_turns.use(None)
        reply = {"seconds": time.perf_counter() - started}
        if turns is not None:
            reply["handoffs"] = turns.handoffs
        return reply

    def record(self, out_dir: str) -> dict:
        from rich.console import Console

        from bench.report.summary import print_summary
        from bench.rounds import record_results

        # No plot: a process's report is one unit of the pooled one, which the driver plots (2 s a process here).
        outcome = record_results(self.results, self.settings, self.env, Path(out_dir), self.started, plot=False)
        print_summary(outcome, Console(file=sys.stderr, width=200), verbose=True)  # the log keeps the table
        if self.scratch is not None:
            self.scratch.cleanup()
        return {
            "csv": str(outcome.paths.csv) if outcome.paths else None,
            "failures": outcome.failures,
            "skipped": outcome.skipped,
        }


class QuitRequested(BaseException):
    """The driver sent "quit" while this worker waited for its turn.

    Not an Exception: the benchmark takes any Exception of one variant as that
    variant's failure and goes on to the next, which would wait for a turn again.
    """


def _where() -> dict:
    """Where this process's harness and measured code come from (loads the op's libraries)."""
    import ops
    from env import paths
    from env.repo import git_commit

    root = ops_root()
    return {
        "bench": __file__,
        "env": paths.__file__,
        "ops": ops.__file__,
        "torch_library": str(ops.torch_library_path()),
        "ort_library": str(ops.ort_library_path()),
        "commit": git_commit(root) if root else git_commit(),
    }


# What a side measured by another tree's harness may lack: a module, a name in it, or an op in its library
# (torch.ops.myops.<missing> is an AttributeError). Said apart from other failures, so the driver can fall back.
LACKS = (ImportError, AttributeError)


def _hello() -> dict:
    # Nothing that loads a library: the driver asks a REF's worker who it is before building REF.
    from bench.report.schema import SCHEMA_VERSION
    from env.paths import REPO_ROOT
    from env.repo import git_commit

    return {"protocol": PROTOCOL, "schema_version": SCHEMA_VERSION, "commit": git_commit(), "root": str(REPO_ROOT)}


def _option_fields() -> dict:
    from dataclasses import fields

    from bench.plan.options import BenchOptions

    return {"options": [f.name for f in fields(BenchOptions)]}


def serve(requests: TextIO, replies: TextIO) -> None:
    def reply(message: dict) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    def wait_for_turn() -> None:
        reply({"turn": "waiting"})
        line = requests.readline()
        if not line:
            raise EOFError("the driver closed the requests while this worker waited for its turn")
        what = json.loads(line).get("do")
        if what == "quit":  # the driver is done with this worker (a run stopped mid-job): leave now
            raise QuitRequested
        if what != "go":
            raise ValueError(f"expected {{'do': 'go'}} while waiting for the turn, got {line.strip()[:200]!r}")

    reply(_hello())
    side: _Side | None = None
    while line := requests.readline():
        request = json.loads(line)
        what = request.get("do")
        try:
            if what == "quit":
                return
            if what == "fields":
                reply(_option_fields())
            elif what == "where":
                reply(_where())
            elif what == "plan":
                side = _Side(dict(request["options"]), int(request.get("page_offset", 0)), request.get("workdir"))
                labels = [job.label for job in side.jobs]  # for the driver's progress display
                reply({"jobs": len(side.jobs), "rounds": side.settings.rounds, "pid": os.getpid(), "labels": labels})
            elif side is None:
                reply({"error": f"{what!r} before 'plan'"})
            elif what == "job":
                turns = Turns(wait_for_turn) if request.get("turns") else None
                try:
                    reply(side.job(int(request["round"]), int(request["index"]), turns))
                except QuitRequested:
                    return
            elif what == "record":
                reply(side.record(request["out_dir"]))
            else:
                reply({"error": f"unknown request {what!r}"})
        except Exception as error:  # the driver reports it; the traceback goes to this side's log
            traceback.print_exc(file=sys.stderr)
            message = {"error": f"{type(error).__name__}: {error}"}
            if what == "plan" and ops_root() is not None and isinstance(error, LACKS):
                message["lacks"] = f"{type(error).__name__}: {error}"
            reply(message)


def _die_with_the_driver() -> None:
    """Linux: SIGKILL this process when its driver dies. While the driver has it stopped (its turns), a killed
    driver could not wake it, and a stopped process heeds no other signal: it would stay, stopped, forever."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
        if os.getppid() == 1:  # the driver died before the line above: nobody will drive this worker
            os._exit(1)


def main() -> None:
    _die_with_the_driver()
    if (root := ops_root()) is not None:
        sys.meta_path.insert(0, _OpsFrom(root))
    # Replies get the original stdout to themselves; anything printed (progress, build
    # messages, the summary) goes to stderr, so no stray line can break the protocol.
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin, replies)


if __name__ == "__main__":
    main()
