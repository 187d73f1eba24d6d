"""bench/measure/pinning.py: the timed loop's thread is pinned to one CPU and unpinned after; other threads are not."""

from __future__ import annotations

import os
import threading

import pytest

from bench.measure.pinning import move_to_timing_cpu, pinned_for_timing, timing_cpu

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs two or more CPUs this process may run on",
)


def test_the_calling_thread_runs_on_the_highest_cpu_inside_and_on_all_after():
    allowed = os.sched_getaffinity(0)
    assert timing_cpu() == max(allowed)
    with pinned_for_timing() as cpu:
        assert cpu == max(allowed) and os.sched_getaffinity(0) == {cpu}
        assert timing_cpu() is None  # already pinned: a nested block changes nothing
    assert os.sched_getaffinity(0) == allowed


def test_the_affinity_is_restored_when_the_block_raises():
    allowed = os.sched_getaffinity(0)
    with pytest.raises(RuntimeError, match="timed call failed"), pinned_for_timing():
        raise RuntimeError("timed call failed")
    assert os.sched_getaffinity(0) == allowed


def test_a_thread_started_before_the_block_keeps_every_cpu():
    # A pool made while a variant is set up (OpenMP's, ONNX Runtime's) must keep every CPU while the loop runs.
    allowed = os.sched_getaffinity(0)
    inside, seen = threading.Event(), {}

    def worker():
        inside.wait(timeout=10)
        seen["cpus"] = os.sched_getaffinity(0)

    thread = threading.Thread(target=worker)
    thread.start()
    with pinned_for_timing():
        inside.set()
        thread.join(timeout=10)
    assert seen["cpus"] == allowed


def test_a_loop_of_parallel_calls_is_not_pinned():
    # Its pool threads need every core; a pinned caller could share its CPU with one of them.
    allowed = os.sched_getaffinity(0)
    with pinned_for_timing(threads=2) as cpu:
        assert cpu is None and os.sched_getaffinity(0) == allowed
    with pinned_for_timing(threads=1) as cpu:
        assert cpu == max(allowed)


def _current_cpu() -> int:
    # Field 39 of the thread's stat: the CPU it last ran on (fields after the name, which may hold spaces).
    with open("/proc/thread-self/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[36])


def test_a_turn_moves_the_thread_onto_the_timing_cpu_and_leaves_it_free(monkeypatch):
    allowed = os.sched_getaffinity(0)
    calls = []
    real = os.sched_setaffinity
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: (calls.append(set(cpus)), real(pid, cpus))[1])
    assert move_to_timing_cpu() == max(allowed)
    assert calls == [{max(allowed)}, allowed] and os.sched_getaffinity(0) == allowed
    # Read right after, the thread is where it was moved (another process may take the CPU in between: retry).
    monkeypatch.undo()
    assert any(move_to_timing_cpu() == _current_cpu() for _ in range(5))


def test_a_pinned_thread_is_not_moved():
    with pinned_for_timing() as cpu:
        assert move_to_timing_cpu() is None and os.sched_getaffinity(0) == {cpu}
