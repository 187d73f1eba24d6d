"""ops.ort.pool under faults: bad requests among good ones, a failed slot, sessions that cannot be created."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.serve.models import make_bank
from ops.model import example_input
from ops.ort.pool import RequestError, RequestFailedError, SessionCreationError, SessionPool
from ops.ort.session import OrtConfig
from ops.reference import REFERENCE
from tests.helpers.serve_models import SMALL, small_model_files


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return small_model_files(tmp_path_factory)


@pytest.fixture(scope="module")
def bank():
    return make_bank(SMALL, size=32)


def bad_requests(good: np.ndarray) -> list[tuple[object, str]]:
    """(feeds, the error text that must name the fault) for each kind of bad request."""
    return [
        ({"x": good[0]}, r"input 'x' must be a float32 array of shape \[\?, \?, 32\] \(rank 3\), got rank 2"),
        ({"x": np.concatenate([good, good], axis=-1)}, r"input 'x' .*dim 2 must be 32, got shape \[1, 8, 64\]"),
        ({"x": good.astype(np.float64)}, r"input 'x' must be a float32 array .* got dtype float64"),
        ({"x": good.tolist()}, r"input 'x' must be a float32 array .* got list"),
        ({"X": good}, r"the model's inputs are \['x'\]; missing \['x'\], unknown \['X'\]"),
        ({"x": good[:, :0]}, r"input 'x' has an empty dim 1"),
    ]


@pytest.mark.parametrize("route", ["standard", "custom"])
def test_bad_requests_fail_alone_while_good_ones_stay_correct(files, bank, route):
    pool = SessionPool.create(files[route], OrtConfig(threads=1, register_custom_ops=route == "custom"), slots=2)
    stop = threading.Event()
    results = {"good": 0, "wrong": 0, "errors": []}

    def good_client(c: int) -> None:
        k = 0
        while not stop.is_set() or k < 50:
            index = (c + 2 * k) % len(bank)
            k += 1
            try:
                (y,) = pool.run({"x": bank.inputs[index]})
            except Exception as error:
                results["errors"].append(repr(error))
                continue
            results["good"] += 1
            results["wrong"] += not bank.matches(index, y)

    clients = [threading.Thread(target=good_client, args=(c,)) for c in range(2)]
    for t in clients:
        t.start()
    try:
        for _ in range(20):
            for feeds, message in bad_requests(bank.inputs[0]):
                with pytest.raises(RequestError, match=message):
                    pool.run(feeds)
            # NaN is data, not an error: the model's answer is NaN where the reference is NaN.
            nan_input = bank.inputs[1].copy()
            nan_input[0, 3, 5] = np.nan
            (y,) = pool.run({"x": nan_input})
            with torch.inference_mode():
                reference = SMALL.torch_model(torch.float64, impl="unfused")(
                    torch.from_numpy(nan_input).double()
                ).numpy()
            assert np.isnan(y).any()
            np.testing.assert_array_equal(np.isnan(y), np.isnan(reference))
            finite = ~np.isnan(reference)
            np.testing.assert_allclose(y[finite], reference[finite], **REFERENCE.fp32_served.as_kwargs())
    finally:
        stop.set()
        for t in clients:
            t.join()
    assert results["errors"] == []
    assert results["wrong"] == 0
    assert results["good"] >= 100


def test_a_slot_whose_request_failed_in_onnxruntime_comes_back_clean(files, bank, monkeypatch):
    pool = SessionPool.create(files["custom"], OrtConfig(threads=1), slots=1)
    slot = pool.slots[0]
    (y,) = pool.run({"x": bank.inputs[0]})
    assert bank.matches(0, y) and slot.allocations == 1
    # Let a wrong hidden size through the pool's check, so that ORT itself fails the run.
    monkeypatch.setattr(pool, "check", lambda feeds: dict(feeds))
    wrong = example_input(1, 8, 48, torch.Generator().manual_seed(0)).numpy()
    with pytest.raises(RequestFailedError, match=r"onnxruntime failed the request \(slot 0 was reset\)"):
        pool.run({"x": wrong})
    assert slot.bound == {} and slot.current is None and slot.allocations == 0
    monkeypatch.undo()
    for index in (1, 2, 0):  # the same (only) slot serves correct answers again
        (y,) = pool.run({"x": bank.inputs[index]})
        assert bank.matches(index, y)
    assert slot.allocations == 1


def test_missing_model_names_the_file(tmp_path):
    missing = tmp_path / "nowhere.onnx"
    with pytest.raises(SessionCreationError, match=f"model file {missing} does not exist"):
        SessionPool.create(missing, OrtConfig(threads=1))


def test_missing_custom_op_library_names_it(files, tmp_path, monkeypatch):
    missing = tmp_path / "libfused_norm_ort.so"
    monkeypatch.setenv("FUSEDBENCH_ORT_LIBRARY", str(missing))
    with pytest.raises(SessionCreationError, match=f"custom-op library {missing} does not exist"):
        SessionPool.create(files["custom"], OrtConfig(threads=1))


def test_a_library_that_is_not_a_custom_op_library_is_named(files, monkeypatch):
    from ops._library import torch_library_path

    not_ort = torch_library_path()  # a real shared library, without RegisterCustomOps
    monkeypatch.setenv("FUSEDBENCH_ORT_LIBRARY", str(not_ort))
    with pytest.raises(
        SessionCreationError, match=f"custom-op library {not_ort} could not be registered: .*RegisterCustomOps"
    ):
        SessionPool.create(files["custom"], OrtConfig(threads=1))


def test_a_library_built_for_a_newer_runtime_is_named_with_the_versions(files, tmp_path, monkeypatch):
    """The real entry point compiled against headers that claim C API 99, linked with the build's other objects."""
    import json
    import re
    import shutil
    import subprocess

    from env.builder.toolchain import cxx_compiler
    from env.paths import build_dir, csrc_dir, toolchain_record_path

    flags = json.loads(toolchain_record_path().read_text())["build"]["ort_cxx_flags"]
    headers = Path(flags[flags.index("-isystem") + 1])
    newer = tmp_path / "include"
    shutil.copytree(headers, newer)
    api = newer / "onnxruntime_c_api.h"
    api.write_text(re.sub(r"#define ORT_API_VERSION \d+", "#define ORT_API_VERSION 99", api.read_text()))
    flags[flags.index("-isystem") + 1] = str(newer)
    entry = tmp_path / "ort_library.o"
    subprocess.run(
        [cxx_compiler(), *flags, "-c", str(csrc_dir() / "ort" / "ort_library.cc"), "-o", str(entry)], check=True
    )
    # The objects the build linked (its own and, in a JIT build, the torch build's kernel core), less the entry point.
    link = (build_dir() / "ort" / "build.log").read_text().split("### link", 1)[1].split("\n###", 1)[0]
    command = next(line for line in link.splitlines() if line.startswith("$ "))
    others = [w for w in command.split() if w.endswith(".o") and not Path(w).name.startswith("ort__ort_library")]
    assert any("fused_norm_cpu" in w for w in others), command
    library = tmp_path / "libfused_norm_ort.so"
    subprocess.run([cxx_compiler(), "-shared", "-fPIC", str(entry), *map(str, others), "-o", str(library)], check=True)
    monkeypatch.setenv("FUSEDBENCH_ORT_LIBRARY", str(library))
    with pytest.raises(
        SessionCreationError,
        match=f"custom-op library {library} could not be registered: .*"
        r"built against ONNX Runtime C API version 99.*rebuild it",
    ):
        SessionPool.create(files["custom"], OrtConfig(threads=1))


def test_a_wait_interrupted_by_a_signal_leaves_no_dead_waiter_to_take_a_slot(monkeypatch):
    # A signal handler raising in a waiting client: the slot given back afterwards must go to a live client.
    import threading as real_threading

    from ops.ort import pool as pool_module

    class Signalled(BaseException):  # what a signal handler raises (bench/serve/run.py's Interrupted)
        pass

    class InterruptedEvent(real_threading.Event):
        def wait(self, timeout=None):
            raise Signalled

    slots = pool_module._FairSlots()
    monkeypatch.setattr(pool_module.threading, "Event", InterruptedEvent)
    with pytest.raises(Signalled):
        slots.get(timeout=5.0)
    monkeypatch.setattr(pool_module.threading, "Event", real_threading.Event)
    slot = object()
    slots.put(slot)
    assert slots.get(timeout=0.1) is slot
