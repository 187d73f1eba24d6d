"""The load driver: K client threads send requests for a bounded time or count.

Each client sends bank input ``(client + k * clients) % len(bank)`` as its k-th
request, so consecutive and concurrent requests differ. Latency is timed
around the call alone; each response is kept and checked against its input's
reference after the timed window, so the checking costs no window time.
Requests answered after the window closes are not counted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from bench.measure import machine
from bench.serve.models import Bank

Call = Callable[[np.ndarray], np.ndarray]  # one request: input -> output the caller owns

MAX_ERROR_MESSAGES = 5


class Stopped(Exception):
    """The stop event was set while the load ran (a signal): the result is incomplete."""


@dataclass
class LoadResult:
    latencies_us: np.ndarray  # one per answered request in the window
    wall_s: float  # from the start barrier until the last client stopped
    mismatches: int
    errors: int
    error_messages: list[str] = field(default_factory=list)
    other_cpu_s: float = float("nan")

    @property
    def requests(self) -> int:
        return len(self.latencies_us)

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.wall_s if self.wall_s > 0 else float("nan")


def drive(
    call: Call,
    bank: Bank,
    clients: int,
    duration_s: float | None = None,
    requests: int | None = None,
    warmup: int = 10,
    stop: threading.Event | None = None,
) -> LoadResult:
    """Run ``clients`` threads against ``call`` for ``duration_s`` seconds or ``requests`` requests in all."""
    if clients < 1:
        raise ValueError(f"clients must be >= 1, got {clients}")
    if (duration_s is None) == (requests is None):
        raise ValueError("give exactly one of duration_s and requests")
    stop = stop or threading.Event()
    quota = [requests // clients + (c < requests % clients) for c in range(clients)] if requests is not None else None
    ready = threading.Semaphore(0)  # released once per client when its warm-up is done
    go = threading.Event()
    window = {"began": 0.0, "deadline": 0.0}
    per_client: list[dict] = [
        {"latency": [], "answers": [], "errors": 0, "messages": [], "end": 0.0} for _ in range(clients)
    ]

    def client(c: int) -> None:
        record = per_client[c]
        for k in range(warmup):  # session and slot buffers, caches: outside the window
            if stop.is_set():
                return
            try:
                call(bank.inputs[(c + k * clients) % len(bank)])
            except Exception:  # a call that keeps failing is counted in the window
                pass
        ready.release()
        while not go.wait(timeout=0.05):
            if stop.is_set():
                return
        latency, answers = record["latency"], record["answers"]
        deadline = window["deadline"]
        record["end"] = window["began"]  # the window ends at this client's last counted request, not a dropped one
        k = 0
        while not stop.is_set() and (quota is None or k < quota[c]):
            index = (c + k * clients) % len(bank)
            k += 1
            t0 = time.perf_counter_ns()
            try:
                output = call(bank.inputs[index])
            except Exception as error:
                record["errors"] += 1
                if len(record["messages"]) < MAX_ERROR_MESSAGES:
                    record["messages"].append(f"{type(error).__name__}: {error}")
                record["end"] = time.perf_counter()
                continue
            t1 = time.perf_counter_ns()
            if quota is None and t1 / 1e9 > deadline:
                break  # answered after the deadline: neither counted nor in the window
            latency.append((t1 - t0) / 1e3)
            answers.append((index, output))
            record["end"] = t1 / 1e9

    threads = [
        threading.Thread(target=client, args=(c,), daemon=True, name=f"serve-client-{c}") for c in range(clients)
    ]
    try:
        for thread in threads:
            thread.start()
        for _ in range(clients):
            while not ready.acquire(timeout=0.05):  # short waits: a signal handler runs between them
                if stop.is_set() or not any(t.is_alive() for t in threads):
                    raise Stopped("stopped during warm-up")
        before = machine.snapshot()
        window["began"] = time.perf_counter()
        # perf_counter_ns / 1e9 and perf_counter share one clock.
        window["deadline"] = window["began"] + duration_s if duration_s is not None else float("inf")
        go.set()
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=0.05)
        after = machine.snapshot()
    except BaseException:
        stop.set()  # clients finish the request in hand and return
        for thread in threads:
            thread.join(timeout=1.0)
        raise
    if stop.is_set():
        raise Stopped("stopped before the load finished")
    wall = max(r["end"] for r in per_client) - window["began"]
    latencies = np.array([v for r in per_client for v in r["latency"]], dtype=np.float64)
    mismatches = sum(not bank.matches(i, out) for r in per_client for i, out in r["answers"])
    return LoadResult(
        latencies_us=latencies,
        wall_s=wall,
        mismatches=mismatches,
        errors=sum(r["errors"] for r in per_client),
        error_messages=[m for r in per_client for m in r["messages"]][:MAX_ERROR_MESSAGES],
        other_cpu_s=machine.other_cpu_seconds(before, after),
    )
