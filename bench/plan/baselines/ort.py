"""``ort``: ONNX Runtime on each export route, called plainly and through IO binding.

On the CPU, variants are ``<route>-run`` (``session.run``, a fresh output each
call) and ``<route>-iobinding`` (ops.ort.session.IOBoundRunner: output buffers
bound once and reused); on CUDA, ``<route>-iobinding`` binds the case's device
tensors as inputs and a preallocated device tensor as the output, so nothing
crosses the bus. The routes are those of ops/onnx/routes.py:
  * ``standard``: plain ONNX ops that ORT fuses into SimplifiedLayerNormalization;
  * ``opset23``: ONNX RMSNormalization;
  * ``custom``:  one myops::fused_norm node run by the custom-op library.
On the add_norm workload each route's residual form: one norm exported with
its residual (inputs x and residual, outputs the norm and the sum).
Each file is exported once per run (every dim but the last is dynamic, so one
export serves every batch and sequence length), by the run's first process or
ahead of its processes (:func:`export_ahead`), and the session threads match
torch's. setup_s = export time (wherever it ran) + session creation; the note lists the norm
nodes ORT actually runs after its graph optimisation. Where the installed
onnxruntime has no working CUDA provider, the CUDA rows are skipped with ORT's
own reason.
"""

from __future__ import annotations

import collections
import functools
from dataclasses import dataclass, replace
from pathlib import Path

import onnx
import torch
from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as OrtNotImplemented

from bench.plan.registry import Prepared, Unsupported, Variant, register
from bench.plan.workloads import AddNormCase, Case, OpCase
from env.files import atomic_path
from ops.dtypes import BY_TORCH, dtype_name
from ops.norms import Norm
from ops.onnx.export import export_model
from ops.onnx.routes import ROUTES
from ops.ort.session import IOBoundRunner, OrtConfig, create_session

# Node types that show how a norm ended up after ORT's optimisation.
_NORM_NODE_TYPES = (
    "SimplifiedLayerNormalization",
    "RMSNormalization",
    "fused_norm",
    "fused_add_norm",
    "SkipSimplifiedLayerNormalization",
    "Pow",
    "ReduceMean",
    "Sqrt",
    "Div",
    "Reciprocal",
)
_EXPORT_BATCH, _EXPORT_SEQ = 2, 4  # the exporter needs dynamic dims of size >= 2 in the example


@dataclass(frozen=True)
class _Exported:
    path: Path
    seconds: float  # the export's own time, wherever it ran (this process, an earlier one, or ahead of the run)
    made_now: bool = False  # exported by the call that returned this: its time is inside that prepare's setup


def _export_key(case: Case, route: str) -> tuple:
    # The weights depend on the workload, hidden size and dtype only (bench/plan/workloads.py);
    # the workdir is the run's, so a later run never reuses a deleted file.
    return (str(case.workdir), case.workload, case.shape[-1], dtype_name(case.dtype), route)


def _seconds_file(path: Path) -> Path:
    """Beside an export: how long it took, so a process that finds the file reports the export in its setup."""
    return path.with_name(path.name + ".seconds")


def _exported(case: Case, route: str, cache: dict) -> _Exported:
    """Export the case's module by ``route`` once per run (op: a lone Norm with the case's weights)."""
    key = _export_key(case, route)
    if key in cache:
        return replace(cache[key], made_now=False)
    path = case.workdir / f"ort-{'-'.join(str(k) for k in key[1:])}.onnx"
    if path.is_file():  # written (atomically) earlier in this run: by another process or ahead of the processes
        seconds = _seconds_file(path)
        cache[key] = _Exported(path, float(seconds.read_text()) if seconds.is_file() else 0.0)
        return cache[key]
    if isinstance(case, (OpCase, AddNormCase)):
        impl = "fused_add" if isinstance(case, AddNormCase) else "fused"
        module = Norm(case.hidden, impl=impl, eps=case.eps).to(case.dtype)
        with torch.no_grad():
            module.weight.copy_(case.weight.cpu())
            module.bias.copy_(case.bias.cpu())
    else:
        module = case.model("fused").cpu()
    example = torch.randn(_EXPORT_BATCH, _EXPORT_SEQ, case.shape[-1]).to(case.dtype)
    if isinstance(case, AddNormCase):
        example = (example, torch.randn(example.shape).to(case.dtype))  # x and residual
    result = export_model(module, example, route, path)
    with atomic_path(_seconds_file(path)) as tmp:
        tmp.write_text(f"{result.seconds:.6f}\n")
    cache[key] = _Exported(result.path, result.seconds)
    return replace(cache[key], made_now=True)


def export_ahead(case: Case) -> None:
    """Export ``case``'s module by every route into its workdir, where the run's ORT variants find it (each with its
    seconds beside it). A case of one row stands for every shape of its workload, hidden size and dtype (the key)."""
    for route in ROUTES:
        _exported(case, route, {})


def _norm_nodes(optimized: Path) -> str:
    counts = collections.Counter(n.op_type for n in onnx.load(optimized, load_external_data=False).graph.node)
    found = [f"{t} x{counts[t]}" for t in _NORM_NODE_TYPES if counts[t]]
    return ", ".join(found) or "no norm-related nodes"


@functools.cache
def _cuda_provider() -> tuple[bool, str]:
    from env.builder.ort_runtime import cuda_provider_status

    return cuda_provider_status()  # a child process: ask once per run


def _device_binding(session, case: Case):
    """Bind the case's device tensor as the input and a NaN-filled device tensor as the output; return the call."""
    x = case.x.contiguous()
    out = torch.full_like(case.reference(), float("nan"), dtype=case.dtype)
    element, index = BY_TORCH[case.dtype].onnx, x.device.index or 0
    binding = session.io_binding()
    binding.bind_input(session.get_inputs()[0].name, "cuda", index, element, list(x.shape), x.data_ptr())
    binding.bind_output(session.get_outputs()[0].name, "cuda", index, element, list(out.shape), out.data_ptr())
    torch.cuda.synchronize()  # ORT runs on its own stream: the inputs must be written before it reads them

    def call():
        session.run_with_iobinding(binding)  # returns after ORT synchronised its stream
        return out

    return call


@register
class Ort:
    name = "ort"
    workloads = frozenset({"op", "add_norm", "model"})
    devices = frozenset({"cpu", "cuda"})
    order = 40

    def __init__(self) -> None:
        self._exports: dict = {}  # _export_key -> _Exported: one export per run and module
        self._notes: dict = {}  # (_export_key, mode) -> what ORT runs after optimisation

    def variants(self, case: Case) -> list[Variant]:
        if case.device == "cuda":
            usable, why = _cuda_provider()
            if not usable:
                raise Unsupported(f"no working CUDA provider in onnxruntime: {why}")
            return [Variant(f"{route}-iobinding", self._prepare(case, route, "iobinding")) for route in ROUTES]
        if BY_TORCH[case.dtype].numpy is None:  # ORT's Python feed type is numpy
            raise Unsupported(f"numpy (ORT's Python feed type) has no {dtype_name(case.dtype)}")
        return [
            Variant(f"{route}-{mode}", self._prepare(case, route, mode))
            for route in ROUTES
            for mode in ("run", "iobinding")
        ]

    def _prepare(self, case: Case, route: str, mode: str):
        def prepare() -> Prepared:
            exported = _exported(case, route, self._exports)
            note_key = (_export_key(case, route), mode, case.device)
            # The optimised graph is written once (first round) to read what ORT fused; later rounds reuse the note.
            optimized = (
                None
                if note_key in self._notes
                else exported.path.with_name(exported.path.stem + f".optimized-{mode}-{case.device}.onnx")
            )
            provider = "cuda" if case.device == "cuda" else "cpu"
            config = OrtConfig(
                provider=provider,
                threads=torch.get_num_threads(),
                register_custom_ops=route == "custom",
                optimized_model_path=optimized,
            )
            try:
                session = create_session(exported.path, config)
            except OrtNotImplemented as error:  # e.g. no float64 Erf kernel on the CPU provider
                raise Unsupported(f"ONNX Runtime has no kernel for this: {str(error).split(' : ')[-1]}") from error
            if optimized is not None:
                nodes = _norm_nodes(optimized)
                self._notes[note_key] = (
                    f"{nodes} after ORT optimisation; setup = export {exported.seconds:.1f} s + session"
                )
            note = self._notes[note_key]
            reused = 0.0 if exported.made_now else exported.seconds  # an export made here is in the setup already
            if case.device == "cuda":
                # ORT runs on its own stream and synchronises before returning: a host timer times it whole.
                return Prepared(
                    _device_binding(session, case),
                    note + "; device buffers bound (no copies)",
                    reused,
                    timer="perf_counter",
                )
            inputs = (case.x, case.residual) if isinstance(case, AddNormCase) else (case.x,)
            feeds = {arg.name: t.numpy() for arg, t in zip(session.get_inputs(), inputs, strict=True)}
            if mode == "run":
                return Prepared(lambda: session.run(None, feeds), note, reused)
            runner = IOBoundRunner(session)
            for buffer in runner.run(
                feeds
            ):  # binds the reused outputs; NaN them so verification proves they are rewritten
                buffer.fill(float("nan"))
            return Prepared(lambda: runner.run(feeds), note + "; outputs bound once and reused", reused)

        return prepare
