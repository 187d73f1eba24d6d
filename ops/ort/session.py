"""ONNX Runtime sessions: the one place that makes them.

Every ORT session in fusedbench (export checks, alignment, benchmarks) comes
from :func:`create_session`, so that provider choice, graph optimisation,
threading and custom-op registration are decided once:

* provider ``"cpu"`` or ``"cuda"``. onnxruntime-gpu lists CUDA as available
  even where its libraries are missing and then quietly runs on CPU; asking
  for CUDA here either gives a session that really uses it or raises
  :class:`ProviderUnavailableError` saying what is available and why not;
* graph optimisation ``"all"`` by default; ``"extended"``, ``"basic"`` or
  ``"disable"`` to find out whether an optimisation causes a problem
  (first step of any diagnosis: run with ``"disable"``);
* intra-op threads: ``instances x threads <= physical cores``. Sessions that
  run concurrently and each use every core fight over them, and the context
  switches eat the gain;
* the custom-op library (domain ``myops``) from ``invoke build``.

:class:`IOBoundRunner` runs a session through IO binding, with the output
buffers allocated once per input shapes and reused.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from ops._files import atomic_path

_OPTIMIZATION_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
_PROVIDERS = {
    # CPU stays in the CUDA list: nodes the CUDA provider does not implement
    # (shape arithmetic, say) run there, as ORT intends.
    "cpu": ["CPUExecutionProvider"],
    "cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"],
}


class ProviderUnavailableError(RuntimeError):
    """The requested execution provider cannot run here; the message says what is available and why."""


class CustomOpsNotRegisteredError(RuntimeError):
    """The model uses a custom-op domain that is not registered with the session."""


@dataclass(frozen=True)
class OrtConfig:
    provider: str = "cpu"  # "cpu" or "cuda"
    optimization: str = "all"  # "disable" | "basic" | "extended" | "all"
    threads: int | None = None  # intra-op threads; None -> physical cores // instances (>= 1)
    instances: int = 1  # sessions the process runs concurrently
    register_custom_ops: bool = True  # load ops.ort_library_path() (domain myops)
    optimized_model_path: str | os.PathLike | None = None  # ORT writes its optimised graph here
    # session.intra_op.allow_spinning: None = spin unless instances > 1 (see session_options).
    allow_spinning: bool | None = None
    # Permit instances x threads > physical cores: only to measure what oversubscription costs.
    oversubscribe: bool = False


def physical_cores() -> int:
    """Physical cores this process may run on (hyper-threads of one core count once)."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    cores = set()
    for cpu in allowed:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            package = (topology / "physical_package_id").read_text().strip()
            core = (topology / "core_id").read_text().strip()
        except OSError:
            # No topology (some containers): every logical CPU counts as a core.
            return len(allowed)
        cores.add((package, core))
    return max(1, len(cores))


def intra_op_threads(config: OrtConfig) -> int:
    """The intra-op thread count for ``config``; ValueError if it oversubscribes the cores."""
    cores = physical_cores()
    if config.instances < 1:
        raise ValueError(f"instances must be >= 1, got {config.instances}")
    threads = config.threads if config.threads is not None else max(1, cores // config.instances)
    if threads < 1:
        raise ValueError(f"threads must be >= 1 (or None for automatic), got {threads}")
    if config.instances * threads > cores and not config.oversubscribe:
        raise ValueError(
            f"{config.instances} instance(s) x {threads} thread(s) = {config.instances * threads} threads exceeds "
            f"the {cores} physical cores of this process; lower threads or instances (threads=None picks "
            f"{max(1, cores // config.instances)})"
        )
    return threads


def spinning_allowed(config: OrtConfig) -> bool:
    """The session.intra_op.allow_spinning value ``config`` gives (ORT's default is to spin)."""
    return config.allow_spinning if config.allow_spinning is not None else config.instances == 1


def session_options(config: OrtConfig) -> ort.SessionOptions:
    """SessionOptions for ``config`` (without the optimised-model path, see create_session)."""
    if config.optimization not in _OPTIMIZATION_LEVELS:
        raise ValueError(f"optimization must be one of {', '.join(_OPTIMIZATION_LEVELS)}, got {config.optimization!r}")
    options = ort.SessionOptions()
    options.graph_optimization_level = _OPTIMIZATION_LEVELS[config.optimization]
    options.intra_op_num_threads = intra_op_threads(config)
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if spinning_allowed(config) is False:
        # Idle pool threads spin for a while waiting for work; with several
        # sessions sharing the cores that spinning steals them from the others.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if config.register_custom_ops:
        from ops._library import ort_library_path  # only now: plain ORT use needs no built library

        options.register_custom_ops_library(str(ort_library_path()))
    return options


def _providers(config: OrtConfig) -> list[str]:
    if config.provider not in _PROVIDERS:
        raise ValueError(f"provider must be one of {', '.join(_PROVIDERS)}, got {config.provider!r}")
    providers = _PROVIDERS[config.provider]
    available = ort.get_available_providers()
    if providers[0] not in available:
        raise ProviderUnavailableError(
            f"{providers[0]} is not in this onnxruntime {ort.__version__} build; available: {', '.join(available)}"
        )
    return providers


def _check_provider_used(session: ort.InferenceSession, config: OrtConfig) -> None:
    wanted = _PROVIDERS[config.provider][0]
    if wanted in session.get_providers():
        return
    from ops.ort.cuda_probe import cuda_provider_status

    reason = cuda_provider_status()[1] if wanted == "CUDAExecutionProvider" else "no reason known"
    raise ProviderUnavailableError(
        f"{wanted} was requested but the session fell back to {', '.join(session.get_providers())}: {reason}. "
        f"Use OrtConfig(provider='cpu') on this machine"
    )


def _explain_unregistered_domain(error: Exception, config: OrtConfig) -> Exception | None:
    match = re.search(r"(\w[\w.]*):(\w+)\(-?\d+\) is not a registered function/op", str(error))
    if not match:
        return None
    domain, op = match.groups()
    hint = (
        "create the session with OrtConfig(register_custom_ops=True) so the library from `invoke build` is loaded"
        if not config.register_custom_ops
        else "the registered custom-op library does not provide it"
    )
    return CustomOpsNotRegisteredError(f"the model uses the custom op {domain}::{op}, which is not registered: {hint}")


def create_session(model: str | os.PathLike | bytes, config: OrtConfig = OrtConfig()) -> ort.InferenceSession:
    """An InferenceSession for ``model`` (path or serialized bytes) set up as ``config`` says."""
    providers = _providers(config)
    options = session_options(config)
    source = model if isinstance(model, bytes) else str(model)

    def make(opts: ort.SessionOptions) -> ort.InferenceSession:
        try:
            return ort.InferenceSession(source, sess_options=opts, providers=providers)
        except Exception as error:  # ORT raises its own pybind exception types
            explained = _explain_unregistered_domain(error, config)
            if explained is not None:
                raise explained from error
            raise

    if config.optimized_model_path is None:
        session = make(options)
    else:
        # ORT writes the file while the session is created; write it beside
        # the target and rename, so a failure never leaves half a model.
        with atomic_path(config.optimized_model_path) as tmp:
            options.optimized_model_filepath = str(tmp)
            # ORT warns on every such session that an "all"-level graph may be
            # machine-specific; that is the point of a diagnostic dump, so
            # only errors are logged here.
            options.log_severity_level = 3
            session = make(options)
    _check_provider_used(session, config)
    return session


class IOBoundRunner:
    """Runs a session with IO binding; output buffers allocated once per input shapes and reused.

    Inputs are bound where they lie (no copy for C-contiguous arrays) and
    rebound only when a different array (or shape) comes in: passing the same
    arrays again, refilled in place, costs nothing extra. The first run for a
    new set of input shapes and dtypes lets ORT allocate the outputs and keeps
    them bound, seen as numpy arrays; later runs write into those buffers. The returned
    arrays ARE those buffers: the next run overwrites them (copy what you
    keep). Not for concurrent use: one runner per thread.
    """

    def __init__(self, session: ort.InferenceSession):
        self._session = session
        self._binding = session.io_binding()
        self._output_names = [o.name for o in session.get_outputs()]
        # name -> (array, shape, dtype) as bound; holding the array keeps the
        # memory ORT reads from alive.
        self._inputs: dict[str, tuple[np.ndarray, tuple[int, ...], np.dtype]] = {}
        self._key: tuple | None = None
        self._held: list[ort.OrtValue] = []  # the output buffers the views below look into
        self._outputs: list[np.ndarray] = []

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        rebound = False
        for name, value in feeds.items():
            held = self._inputs.get(name)
            if held is not None and held[0] is value and held[1] == value.shape and held[2] == value.dtype:
                continue
            array = value if value.flags.c_contiguous else np.ascontiguousarray(value)
            self._binding.bind_cpu_input(name, array)
            self._inputs[name] = (array, array.shape, array.dtype)
            rebound = True
        if rebound:
            key = tuple(sorted((name, shape, dtype.str) for name, (_, shape, dtype) in self._inputs.items()))
            if key != self._key:
                self._allocate_outputs(key)
                return self._outputs
        self._session.run_with_iobinding(self._binding)
        self._binding.synchronize_outputs()
        return self._outputs

    def _allocate_outputs(self, key: tuple) -> None:
        # Output shapes can depend on input values in general; one run with
        # ORT-allocated outputs tells them exactly, and those outputs stay
        # bound from now on. They are ORT's own buffers, seen through numpy
        # views: ORT's allocator starts them at a cache line, as torch does,
        # where a numpy array starts 16 bytes into one (then each of the
        # kernel's 64-byte vector stores would straddle two lines).
        for name in self._output_names:
            self._binding.bind_output(name, "cpu")
        self._session.run_with_iobinding(self._binding)
        self._binding.synchronize_outputs()
        values = self._binding.get_outputs()
        for name, value in zip(self._output_names, values, strict=True):
            self._binding.bind_ortvalue_output(name, value)
        self._key, self._held, self._outputs = key, values, [value.numpy() for value in values]


__all__ = [
    "CustomOpsNotRegisteredError",
    "IOBoundRunner",
    "OrtConfig",
    "ProviderUnavailableError",
    "create_session",
    "intra_op_threads",
    "physical_cores",
    "session_options",
    "spinning_allowed",
]
