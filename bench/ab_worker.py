"""One build's side of an A/B run (bench/ab.py): runs this tree's benchmark one round at a time, on request.

Started as ``python -m bench.ab_worker`` with this tree as the working
directory, so it imports this tree's code and (through its build record) this
tree's libraries. It speaks JSON lines: requests on stdin, one reply per
request on the original stdout; everything else the benchmark prints goes to
stderr (the side's log). The requests are the three steps of bench/run.py:

  {"do": "plan", "options": {...}}   -> {"jobs": N, "rounds": R}
  {"do": "round", "index": i}        -> {"seconds": s}
  {"do": "record", "out_dir": "..."} -> {"csv": path or null, "failures": [...], "skipped": [...]}
  {"do": "quit"}

The first line it writes, before any request, says who it is: the protocol
version, the report schema version and the commit. A reply carrying "error" is
a failure of that request (the message says what went wrong).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import TextIO

# Bump when a request or reply changes: the driver skips a build that speaks another version.
PROTOCOL = 1


class _Side:
    """The state of one run between requests: its jobs, settings, results and scratch folder."""

    def __init__(self, options: dict) -> None:
        import torch

        from bench.environment import environment_columns, utc_timestamp
        from bench.run import BenchOptions, Results, default_threads, plan_jobs, run_settings

        if options.get("op_shapes") is not None:
            options["op_shapes"] = tuple(tuple(s) for s in options["op_shapes"])
        if options.get("model_batches") is not None:
            options["model_batches"] = tuple(tuple(b) for b in options["model_batches"])
        self.options = BenchOptions(**options)
        self.started = time.perf_counter()
        threads = self.options.threads or default_threads()
        torch.set_num_threads(threads)
        self.settings = run_settings(self.options)
        self.env = environment_columns(threads, "cpu", utc_timestamp())
        self.scratch = tempfile.TemporaryDirectory(prefix="fusedbench-ab-")
        self.jobs = plan_jobs(self.options, Path(self.scratch.name))
        self.results = Results()

    def round(self, index: int) -> dict:
        from bench.run import run_round

        started = time.perf_counter()
        run_round(self.jobs, index, self.settings, self.results, lambda job: print(f"round {index + 1}: {job.label}", file=sys.stderr, flush=True))
        return {"seconds": time.perf_counter() - started}

    def record(self, out_dir: str) -> dict:
        from rich.console import Console

        from bench.run import record_results
        from bench.summary import print_summary

        outcome = record_results(self.results, self.settings, self.env, Path(out_dir), self.started)
        print_summary(outcome, Console(file=sys.stderr, width=200))
        self.scratch.cleanup()
        return {"csv": str(outcome.paths.csv) if outcome.paths else None, "failures": outcome.failures, "skipped": outcome.skipped}


def _hello() -> dict:
    from bench.report import SCHEMA_VERSION
    from env.paths import REPO_ROOT
    from env.repo import git_commit

    return {"protocol": PROTOCOL, "schema_version": SCHEMA_VERSION, "commit": git_commit(), "root": str(REPO_ROOT)}


def serve(requests: TextIO, replies: TextIO) -> None:
    def reply(message: dict) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    reply(_hello())
    side: _Side | None = None
    for line in requests:
        request = json.loads(line)
        what = request.get("do")
        try:
            if what == "quit":
                return
            if what == "plan":
                side = _Side(dict(request["options"]))
                reply({"jobs": len(side.jobs), "rounds": side.settings.rounds})
            elif side is None:
                reply({"error": f"{what!r} before 'plan'"})
            elif what == "round":
                reply(side.round(int(request["index"])))
            elif what == "record":
                reply(side.record(request["out_dir"]))
            else:
                reply({"error": f"unknown request {what!r}"})
        except Exception as error:  # the driver reports it; the traceback goes to this side's log
            traceback.print_exc(file=sys.stderr)
            reply({"error": f"{type(error).__name__}: {error}"})


def main() -> None:
    # Replies get the original stdout to themselves; anything printed (progress, build
    # messages, the summary) goes to stderr, so no stray line can break the protocol.
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin, replies)


if __name__ == "__main__":
    main()
