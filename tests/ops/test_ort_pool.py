"""ops.ort.pool: correctness under concurrency (10,000 requests per route), slot exclusivity, shapes, leases."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from bench.serve.models import make_bank
from ops.model import example_input
from ops.ort.pool import SessionCreationError, SessionPool
from ops.ort.session import OrtConfig
from ops.reference import REFERENCE
from tests.helpers.serve_models import SMALL, small_model_files

ROUTES = ("standard", "opset23", "custom")
REQUESTS, CLIENTS, SLOTS = 10_000, 4, 3  # fewer slots than clients: requests wait for a slot too


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return small_model_files(tmp_path_factory)


@pytest.fixture(scope="module")
def bank():
    return make_bank(SMALL, size=97)  # prime: clients' request sequences do not line up with the bank


def guard_exclusive_slots(pool: SessionPool) -> list[str]:
    """Wrap every slot's run so that two overlapping requests on one slot are recorded."""
    violations: list[str] = []
    for slot in pool.slots:
        busy = threading.Lock()
        inner = slot.run

        def run(feeds, inner=inner, busy=busy, slot=slot):
            if not busy.acquire(blocking=False):
                violations.append(f"slot {slot.index} entered twice")
                return inner(feeds)
            try:
                return inner(feeds)
            finally:
                busy.release()

        slot.run = run
    return violations


@pytest.mark.parametrize("route", ROUTES)
def test_ten_thousand_concurrent_requests_all_correct(files, bank, route):
    pool = SessionPool.create(
        files[route], OrtConfig(threads=1, register_custom_ops=route == "custom"), sessions=2, slots=SLOTS
    )
    violations = guard_exclusive_slots(pool)
    counts = [0] * CLIENTS
    mismatches: list[tuple[int, int]] = []
    errors: list[str] = []

    def client(c: int) -> None:
        held: list[
            tuple[int, np.ndarray]
        ] = []  # responses are checked again 4 requests later: they must be the caller's
        for k in range(REQUESTS // CLIENTS):
            index = (c * 31 + k * CLIENTS) % len(bank)
            try:
                (y,) = pool.run({"x": bank.inputs[index]})
            except Exception as error:  # counted, so one failure does not hide the rest
                errors.append(repr(error))
                continue
            counts[c] += 1
            if not bank.matches(index, y):
                mismatches.append((c, index))
            held.append((index, y))
            if len(held) > 4:
                old_index, old = held.pop(0)
                if not bank.matches(old_index, old):
                    mismatches.append((c, old_index))

    threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert mismatches == []
    assert sum(counts) == REQUESTS
    assert violations == []
    # Buffers were allocated once per slot (one shape) and reused for every later request.
    assert [s.allocations for s in pool.slots] == [1] * SLOTS


def test_the_caller_owns_what_run_returns(files, bank):
    pool = SessionPool.create(files["custom"], OrtConfig(threads=1), slots=1)
    (first,) = pool.run({"x": bank.inputs[0]})
    kept = first.copy()
    pool.run({"x": bank.inputs[1]})  # the same slot serves the next request
    np.testing.assert_array_equal(first, kept)
    assert bank.matches(0, first)


def test_lease_gives_the_slot_buffer_until_release(files, bank):
    pool = SessionPool.create(files["custom"], OrtConfig(threads=1), slots=1)
    with pool.lease({"x": bank.inputs[2]}) as (view,):
        assert bank.matches(2, view)
        address = view.ctypes.data
    with pool.lease({"x": bank.inputs[3]}) as (again,):
        assert again.ctypes.data == address  # one buffer, reused: the earlier view now shows request 3
        assert bank.matches(3, view)


def test_shapes_change_with_per_shape_buffers(files, generator):
    model = SMALL.torch_model(torch.float64, impl="unfused")
    pool = SessionPool.create(files["custom"], OrtConfig(threads=1), slots=1, shapes_per_slot=2)
    slot = pool.slots[0]
    for seq in (8, 5, 8, 5, 13, 8, 5):  # 13 evicts the least recently used of {8, 5}
        x = example_input(2, seq, SMALL.d_model, generator)
        (y,) = pool.run({"x": x.numpy()})
        with torch.inference_mode():
            ref = model(x.double()).numpy()
        assert y.shape == (2, seq, SMALL.d_model)
        np.testing.assert_allclose(y, ref, **REFERENCE.fp32_served.as_kwargs())
        assert len(slot.bound) <= 2
    # 8, 5 allocate; 8, 5 reuse; 13 evicts 8; 8 evicts 5; 5 evicts 13: five allocations in seven requests.
    assert slot.allocations == 5


def test_without_the_custom_op_library(files, bank):
    pool = SessionPool.create(files["standard"], OrtConfig(threads=1, register_custom_ops=False))
    (y,) = pool.run({"x": bank.inputs[4]})
    assert bank.matches(4, y)
    with pytest.raises(SessionCreationError, match="myops::fused_norm.*register_custom_ops=True"):
        SessionPool.create(files["custom"], OrtConfig(threads=1, register_custom_ops=False))


def test_a_waiting_request_is_served_while_other_clients_keep_sending(files, bank):
    # One slot and two clients that send again the moment they get an answer: a slot
    # given back must go to the request waiting longest, not to the client that just
    # returned it (which would starve the third caller for as long as they keep sending).
    pool = SessionPool.create(files["standard"], OrtConfig(threads=1), slots=1)
    stop = threading.Event()

    def busy_client() -> None:
        while not stop.is_set():
            pool.run({"x": bank.inputs[0]})

    clients = [threading.Thread(target=busy_client) for _ in range(2)]
    for t in clients:
        t.start()
    try:
        for k in range(20):
            (y,) = pool.run({"x": bank.inputs[k % len(bank)]}, timeout=10.0)  # TimeoutError if starved
            assert bank.matches(k % len(bank), y)
    finally:
        stop.set()
        for t in clients:
            t.join()
