"""A pool of IO-binding slots for serving one model to many concurrent callers.

    pool = SessionPool.create("build/onnx/custom.onnx", OrtConfig(threads=1), sessions=1, slots=4)
    (y,) = pool.run({"x": x})                    # y is the caller's own copy
    with pool.lease({"x": x}) as (y,):           # y is the slot's buffer: valid inside the block only
        use(y)

Why a pool: binding buffers once and reusing them saves the allocation and
binding work of every call, but a bound buffer may serve one request at a time.
Each slot owns an ``IOBinding`` and its input and output buffers, allocated once
by ORT's CPU allocator (``OrtValue.ortvalue_from_shape_and_type`` for inputs;
the outputs ORT allocates on the slot's first run for a shape). A request waits
for a free slot (first come, first served: a returned slot is handed straight
to the longest-waiting request, so a busy client that gives a slot back cannot
take it again ahead of a waiting one; the slots, and the sessions behind them,
take turns), copies its inputs into the slot's input buffers, runs, and gives the
slot back. No slot is ever used by two requests at once.

Shapes: each slot keeps bound buffers for up to ``shapes_per_slot`` input shapes
(least recently used dropped first). A request of a shape the slot already
holds only rebinds those buffers when the slot last ran another shape; a new
shape allocates buffers on that request. So a service with a few fixed shapes
allocates nothing after warm-up, and arbitrary shapes still work.

Bad requests: inputs are checked against the model's declared inputs before
any slot is taken (name, dtype, rank, fixed dims) and raise :class:`RequestError`
naming the input and the expectation. NaN is not an error: the model's answer
for a NaN input is NaN (in the rows it reaches). A request that fails inside
ORT raises :class:`RequestFailedError`; its slot drops all its buffers and
bindings before it goes back, so the next request starts from a clean slot.

Sessions that cannot be created raise :class:`SessionCreationError` naming the
cause: a missing model file, a missing custom-op library, a library the runtime
refuses (built for another ONNX Runtime C API version, or not a custom-op
library), a model that needs the custom-op library when none is registered.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from ops.dtypes import BY_ORT, DTYPES
from ops.ort.session import CustomOpsNotRegisteredError, OrtConfig, create_session, session_options


class RequestError(ValueError):
    """A request's inputs do not fit the model; the message names the input and what it must be."""


class RequestFailedError(RuntimeError):
    """ONNX Runtime failed a request; its slot was reset and returned to the pool."""


class SessionCreationError(RuntimeError):
    """A session for the pool could not be created; the message names the cause."""


class PoolClosedError(RuntimeError):
    """The pool was closed; no more requests are served."""


@dataclass(frozen=True)
class InputSpec:
    """One model input: name, numpy dtype, and dims (int = fixed, None = dynamic)."""

    name: str
    dtype: np.dtype
    dims: tuple[int | None, ...]

    @classmethod
    def of(cls, node: ort.NodeArg) -> InputSpec:
        dtype = BY_ORT.get(node.type)
        if dtype is None or dtype.numpy is None:
            served = ", ".join(d.ort for d in DTYPES if d.numpy is not None)
            raise SessionCreationError(f"input {node.name!r} has type {node.type}; the pool serves {served}")
        return cls(node.name, dtype.numpy, tuple(d if isinstance(d, int) else None for d in node.shape))

    def expectation(self) -> str:
        dims = ", ".join("?" if d is None else str(d) for d in self.dims)
        return f"a {self.dtype.name} array of shape [{dims}]"

    def check(self, value: object) -> np.ndarray:
        """The request's value for this input, or RequestError saying what is wrong."""
        if not isinstance(value, np.ndarray):
            raise RequestError(f"input {self.name!r} must be {self.expectation()}, got {type(value).__name__}")
        if value.dtype != self.dtype:
            raise RequestError(f"input {self.name!r} must be {self.expectation()}, got dtype {value.dtype.name}")
        if value.ndim != len(self.dims):
            raise RequestError(
                f"input {self.name!r} must be {self.expectation()} (rank {len(self.dims)}), got rank {value.ndim} "
                f"shape {list(value.shape)}"
            )
        for axis, (want, got) in enumerate(zip(self.dims, value.shape, strict=True)):
            if want is not None and want != got:
                raise RequestError(
                    f"input {self.name!r} must be {self.expectation()}: dim {axis} must be {want}, "
                    f"got shape {list(value.shape)}"
                )
            if got < 1:
                raise RequestError(
                    f"input {self.name!r} has an empty dim {axis} (shape {list(value.shape)}); every dim must be >= 1"
                )
        return value


@dataclass
class _Bound:
    """Buffers of one input-shape key: ORT-allocated OrtValues and numpy views of their memory."""

    inputs: list[tuple[str, ort.OrtValue, np.ndarray]]
    outputs: list[tuple[str, ort.OrtValue, np.ndarray]]


class _Slot:
    """One binding and its buffers; used by one request at a time (the pool's queue guarantees it)."""

    def __init__(self, index: int, session: ort.InferenceSession, session_index: int, shapes: int):
        self.index = index
        self.session = session
        self.session_index = session_index
        self._shapes = shapes
        self._output_names = [o.name for o in session.get_outputs()]
        self.reset()

    def reset(self) -> None:
        """Forget every buffer and binding: the state of a new slot."""
        self.binding = self.session.io_binding()
        self.bound: OrderedDict[tuple, _Bound] = OrderedDict()
        self.current: tuple | None = None
        self.allocations = 0  # buffer sets allocated since the last reset (tests and diagnosis)

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Run the request; returns views of the slot's output buffers."""
        key = tuple((name, value.shape) for name, value in feeds.items())
        bound = self.bound.get(key)
        if bound is None:
            return self._first_run(key, feeds)
        self.bound.move_to_end(key)
        if self.current != key:
            self._bind(bound)
            self.current = key
        for name, _, view in bound.inputs:
            np.copyto(view, feeds[name])
        self.session.run_with_iobinding(self.binding)
        return [view for _, _, view in bound.outputs]

    def _bind(self, bound: _Bound) -> None:
        for name, value, _ in bound.inputs:
            self.binding.bind_ortvalue_input(name, value)
        for name, value, _ in bound.outputs:
            self.binding.bind_ortvalue_output(name, value)

    def _first_run(self, key: tuple, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        # Inputs: buffers from ORT's CPU allocator, filled through a numpy view.
        inputs = []
        for name, value in feeds.items():
            buffer = ort.OrtValue.ortvalue_from_shape_and_type(list(value.shape), value.dtype, "cpu", 0)
            view = buffer.numpy()
            np.copyto(view, value)
            inputs.append((name, buffer, view))
            self.binding.bind_ortvalue_input(name, buffer)
        # Outputs: ORT allocates them on this run (their shapes need not be
        # known in advance); they are then bound for every later run.
        for name in self._output_names:
            self.binding.bind_output(name, "cpu")
        self.current = None  # until the run succeeds the binding matches no stored key
        self.session.run_with_iobinding(self.binding)
        outputs = []
        for name, value in zip(self._output_names, self.binding.get_outputs(), strict=True):
            view = value.numpy()
            outputs.append((name, value, view))
            self.binding.bind_ortvalue_output(name, value)
        bound = _Bound(inputs, outputs)
        self.bound[key] = bound
        self.current = key
        self.allocations += 1
        if len(self.bound) > self._shapes:
            self.bound.popitem(last=False)
        return [view for _, _, view in outputs]


class _FairSlots:
    """Free slots handed out first come, first served.

    ``queue.Queue`` lets the thread that puts a slot back take it again before
    a woken waiter runs, so a client in a tight loop can starve the others for
    as long as it keeps sending. Here a returned slot goes directly to the
    oldest waiter.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: deque[_Slot] = deque()
        self._waiters: deque[list] = deque()  # [event, slot or None], oldest first

    def put(self, slot: _Slot) -> None:
        with self._lock:
            if self._waiters:
                waiter = self._waiters.popleft()
                waiter[1] = slot
                waiter[0].set()
            else:
                self._free.append(slot)

    def get(self, timeout: float | None = None) -> _Slot | None:
        """The next free slot; None when ``timeout`` seconds pass first."""
        with self._lock:
            if self._free and not self._waiters:
                return self._free.popleft()
            waiter = [threading.Event(), None]
            self._waiters.append(waiter)
        try:
            if waiter[0].wait(timeout):
                return waiter[1]
        except BaseException:  # a signal handler raised while waiting: leave no dead waiter queued
            with self._lock:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                slot = waiter[1]
            if slot is not None:  # it was handed a slot it will never use: pass it on
                self.put(slot)
            raise
        with self._lock:
            if waiter[1] is not None:  # handed a slot just as the wait ran out
                return waiter[1]
            self._waiters.remove(waiter)
        return None


class SessionPool:
    """N IO-binding slots over one or more sessions of one model; safe to call from many threads."""

    def __init__(self, sessions: list[ort.InferenceSession], slots: int, shapes_per_slot: int = 4):
        if not sessions:
            raise ValueError("sessions must hold at least one InferenceSession")
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        if shapes_per_slot < 1:
            raise ValueError(f"shapes_per_slot must be >= 1, got {shapes_per_slot}")
        self.sessions = list(sessions)
        self.specs = [InputSpec.of(node) for node in self.sessions[0].get_inputs()]
        self.slots = [
            _Slot(i, self.sessions[i % len(self.sessions)], i % len(self.sessions), shapes_per_slot)
            for i in range(slots)
        ]
        self._free = _FairSlots()
        for slot in self.slots:
            self._free.put(slot)
        self._closed = threading.Event()
        self._names = [spec.name for spec in self.specs]
        # (name, dtype, shape) already checked once: the per-request check is then one set lookup per input.
        self._accepted: set[tuple[str, np.dtype, tuple[int, ...]]] = set()

    @classmethod
    def create(
        cls,
        model: str | os.PathLike,
        config: OrtConfig | None = None,
        sessions: int = 1,
        slots: int | None = None,
        shapes_per_slot: int = 4,
    ) -> SessionPool:
        """``sessions`` sessions of ``model`` made as ``config`` (default ``OrtConfig()``) says; ``slots``
        defaults to 2 per session."""
        config = config or OrtConfig()
        if sessions < 1:
            raise ValueError(f"sessions must be >= 1, got {sessions}")
        made = [create_pool_session(model, config) for _ in range(sessions)]
        return cls(made, slots if slots is not None else 2 * sessions, shapes_per_slot)

    def check(self, feeds: Mapping[str, object]) -> dict[str, np.ndarray]:
        """The request's feeds, checked against the model's inputs (RequestError otherwise)."""
        if type(feeds) is dict and len(feeds) == len(self._names):
            try:
                checked = {name: feeds[name] for name in self._names}
            except KeyError:
                checked = None
            if checked is not None and all(
                type(v) is np.ndarray and (name, v.dtype, v.shape) in self._accepted for name, v in checked.items()
            ):
                return checked
        if not isinstance(feeds, Mapping):
            raise RequestError(f"feeds must be a mapping of input name -> array, got {type(feeds).__name__}")
        names = [spec.name for spec in self.specs]
        unknown = sorted(set(feeds) - set(names))
        missing = [n for n in names if n not in feeds]
        if unknown or missing:
            raise RequestError(f"the model's inputs are {names}; missing {missing}, unknown {unknown}")
        checked = {spec.name: spec.check(feeds[spec.name]) for spec in self.specs}
        if len(self._accepted) < 1024:  # bounded: a service that sees endless shapes just checks in full
            self._accepted.update((name, v.dtype, v.shape) for name, v in checked.items())
        return checked

    @contextlib.contextmanager
    def lease(self, feeds: Mapping[str, object], timeout: float | None = None) -> Iterator[list[np.ndarray]]:
        """Run one request; yields views of the slot's outputs, valid until the block ends."""
        checked = self.check(feeds)  # before a slot is taken: a bad request never holds one
        slot = self._acquire(timeout)
        try:
            yield self._run_on(slot, checked)
        finally:
            self._free.put(slot)

    def run(self, feeds: Mapping[str, object], timeout: float | None = None) -> list[np.ndarray]:
        """Run one request; returns copies the caller owns."""
        checked = self.check(feeds)  # before a slot is taken: a bad request never holds one
        slot = self._acquire(timeout)
        try:
            return [view.copy() for view in self._run_on(slot, checked)]
        finally:
            self._free.put(slot)

    @staticmethod
    def _run_on(slot: _Slot, checked: dict[str, np.ndarray]) -> list[np.ndarray]:
        try:
            return slot.run(checked)
        except Exception as error:
            slot.reset()  # whatever ORT left bound or half-allocated goes with it
            raise RequestFailedError(
                f"onnxruntime failed the request (slot {slot.index} was reset): {error}"
            ) from error

    def _acquire(self, timeout: float | None) -> _Slot:
        if self._closed.is_set():
            raise PoolClosedError("the pool is closed")
        slot = self._free.get(timeout=timeout)
        if slot is None:
            raise TimeoutError(f"no free slot within {timeout} s (all {len(self.slots)} slots busy)")
        if self._closed.is_set():
            self._free.put(slot)
            raise PoolClosedError("the pool is closed")
        return slot

    def close(self) -> None:
        """Refuse new requests; requests in flight finish."""
        self._closed.set()


def create_pool_session(model: str | os.PathLike, config: OrtConfig) -> ort.InferenceSession:
    """create_session, with every failure turned into a SessionCreationError that names its cause."""
    path = Path(model)
    if not path.is_file():
        raise SessionCreationError(f"model file {path} does not exist - export it first (invoke export)")
    library = None
    if config.register_custom_ops:
        from ops._library import LibraryNotBuiltError, ort_library_path

        try:
            library = ort_library_path()
        except LibraryNotBuiltError as error:
            raise SessionCreationError(f"custom-op library missing: {error}") from error
        if not library.is_file():
            raise SessionCreationError(
                f"custom-op library {library} does not exist - run `invoke build` (or fix $FUSEDBENCH_ORT_LIBRARY)"
            )
        try:
            # Registration happens here (ORT loads the library and calls its
            # RegisterCustomOps): an error now is the library's, not the model's.
            session_options(config)
        except ValueError:
            raise
        except Exception as error:  # ORT's pybind exceptions share no useful base class
            raise SessionCreationError(f"custom-op library {library} could not be registered: {error}") from error
    try:
        return create_session(path, config)
    except CustomOpsNotRegisteredError as error:
        raise SessionCreationError(f"{path.name}: {error}") from error
    except ValueError:
        raise
    except Exception as error:
        raise SessionCreationError(f"onnxruntime could not create a session for {path}: {error}") from error


__all__ = [
    "InputSpec",
    "PoolClosedError",
    "RequestError",
    "RequestFailedError",
    "SessionCreationError",
    "SessionPool",
    "create_pool_session",
]
