"""Runs the hostile-graph corpus in worker processes with a deadline per case, and judges each outcome.

Cases are split into contiguous slices, one per worker slot; each slot runs a
worker (tests/helpers/hostile_worker.py) over its slice. A worker that dies
(signal, abort, sanitizer report) or says nothing for ``deadline`` seconds is
recorded as a crash or a hang of the case it had begun, and a new worker goes
on from the next case: one bad case never hides the others.
"""

from __future__ import annotations

import collections
import json
import os
import selectors
import subprocess
import sys
import threading
import time
from pathlib import Path

WORKER = Path(__file__).with_name("hostile_worker.py")
CLEAN_ERROR_TYPES = ("InvalidArgument", "Fail")
# The op refuses a node it cannot serve (no float epsilon) when ORT creates its
# kernel, while the session loads; ORT re-labels any such refusal
# RUNTIME_EXCEPTION ("Exception during initialization: <the op's message>").
LOAD_ERROR_TYPES = (*CLEAN_ERROR_TYPES, "RuntimeException")


def _run_slice(
    folder: Path, library: str, first: int, last: int, deadline: float, env: dict | None, results: dict
) -> None:
    start = first
    while start < last:
        command = [sys.executable, str(WORKER), str(folder), library, str(start), str(last)]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        selector = selectors.DefaultSelector()
        selector.register(process.stdout, selectors.EVENT_READ)
        buffer, current, hung = b"", None, False
        while True:
            if not selector.select(timeout=deadline):
                hung = True
                process.kill()
                break
            chunk = os.read(process.stdout.fileno(), 65536)
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                text = line.decode(errors="replace")
                if text.startswith("begin "):
                    current = int(text.split()[1])
                elif text.strip():
                    result = json.loads(text)
                    results[result["index"]] = result
                    current = None
        stderr = process.stderr.read().decode(errors="replace")
        returncode = process.wait()
        selector.close()
        if current is None:
            if returncode != 0 and not hung:
                raise RuntimeError(f"hostile worker failed outside any case (exit {returncode}):\n{stderr[-3000:]}")
            done = [i for i in range(start, last) if i in results]
            start = (max(done) + 1) if done else last
            continue
        results[current] = {
            "index": current,
            "outcome": "hang" if hung else "crash",
            "message": (f"no answer within {deadline} s" if hung else f"exit status {returncode}")
            + (f"; stderr: {stderr[-2000:]}" if stderr.strip() else ""),
        }
        start = current + 1


def run_corpus(
    folder: Path, library: Path | str, slots: int = 2, deadline: float = 60.0, env: dict | None = None
) -> list[dict]:
    """Every case's outcome, merged with its manifest entry, in index order."""
    manifest = json.loads((folder / "manifest.json").read_text())
    bounds = [round(i * len(manifest) / slots) for i in range(slots + 1)]
    results: dict[int, dict] = {}
    errors: list[BaseException] = []

    def slot(first: int, last: int) -> None:
        try:
            _run_slice(folder, str(library), first, last, deadline, env, results)
        except BaseException as error:  # noqa: BLE001 (re-raised in the caller's thread)
            errors.append(error)

    threads = [threading.Thread(target=slot, args=(bounds[i], bounds[i + 1])) for i in range(slots)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return [{**case, **results[case["index"]]} for case in manifest]


def problem(result: dict) -> str | None:
    """Why this outcome is not acceptable for its case, or None."""
    outcome, expect = result["outcome"], result["expect"]
    if outcome in ("crash", "hang", "wrong", "unverified"):
        return f"{outcome}: {result.get('message', '')}"
    if outcome == "correct":
        return None if expect in ("correct", "either") else "the op accepted a malformed call"
    # An error: never acceptable where a result is expected.
    if expect == "correct":
        return f"{result['stage']} failed: {result['message']}"
    if outcome == "op_error":
        allowed = LOAD_ERROR_TYPES if result["stage"] == "load" else CLEAN_ERROR_TYPES
        if result["error_type"] not in allowed:
            return f"the op's error came as {result['error_type']} at {result['stage']}, not one of {allowed}"
        if result["operand"] and result["operand"] not in result["message"]:
            return f"the op's error does not name {result['operand']}: {result['message']}"
    return None


def coverage(results: list[dict]) -> dict[str, dict[str, int]]:
    """kind -> outcome -> count."""
    table: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for result in results:
        table[result["kind"]][result["outcome"]] += 1
    return {kind: dict(sorted(counts.items())) for kind, counts in table.items()}


def coverage_text(results: list[dict], seconds: float) -> str:
    outcomes = ["correct", "op_error", "ort_refused", "wrong", "unverified", "crash", "hang"]
    table = coverage(results)
    lines = [f"{'kind':<14}" + "".join(f"{o:>12}" for o in outcomes) + f"{'cases':>8}"]
    for kind, counts in table.items():
        lines.append(
            f"{kind:<14}" + "".join(f"{counts.get(o, 0):>12}" for o in outcomes) + f"{sum(counts.values()):>8}"
        )
    totals = collections.Counter(r["outcome"] for r in results)
    lines.append(f"{'all':<14}" + "".join(f"{totals.get(o, 0):>12}" for o in outcomes) + f"{len(results):>8}")
    lines.append(f"{len(results)} models in {seconds:.1f} s")
    return "\n".join(lines)


def timed_run(folder: Path, library: Path | str, **kwargs) -> tuple[list[dict], float]:
    started = time.perf_counter()
    results = run_corpus(folder, library, **kwargs)
    return results, time.perf_counter() - started
