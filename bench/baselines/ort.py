"""``ort``: ONNX Runtime (CPU) on each export route, called plainly and through IO binding.

Variants are ``<route>-run`` (``session.run``, a fresh output each call) and
``<route>-iobinding`` (ops.ort.session.IOBoundRunner: output buffers bound once
and reused) for the routes of ops/onnx/routes.py:
  * ``standard``: plain ONNX ops that ORT fuses into SimplifiedLayerNormalization;
  * ``opset23``: ONNX RMSNormalization;
  * ``custom``:  one myops::fused_norm node run by the custom-op library.
Each file is exported once per run (every dim but the last is dynamic, so one
export serves every batch and sequence length) and the session threads match
torch's. setup_s = export time + session creation; the note lists the norm
nodes ORT actually runs after its graph optimisation.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from pathlib import Path

import onnx
import torch
from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as OrtNotImplemented

from bench.registry import Prepared, Unsupported, Variant, register
from bench.workloads import Case, OpCase, dtype_name
from ops.onnx.export import export_model
from ops.onnx.routes import ROUTES
from ops.norms import Norm
from ops.ort.session import IOBoundRunner, OrtConfig, create_session

# numpy has no bfloat16: ORT cannot be fed one from Python.
_UNSUPPORTED_DTYPES = {torch.bfloat16: "numpy (ORT's Python feed type) has no bfloat16"}
# Node types that show how a norm ended up after ORT's optimisation.
_NORM_NODE_TYPES = ("SimplifiedLayerNormalization", "RMSNormalization", "fused_norm", "Pow", "ReduceMean", "Sqrt", "Div", "Reciprocal")
_EXPORT_BATCH, _EXPORT_SEQ = 2, 4  # the exporter needs dynamic dims of size >= 2 in the example


@dataclass(frozen=True)
class _Exported:
    path: Path
    seconds: float


def _export_key(case: Case, route: str) -> tuple:
    # The weights depend on the workload, hidden size and dtype only (bench/workloads.py);
    # the workdir is the run's, so a later run never reuses a deleted file.
    return (str(case.workdir), case.workload, case.shape[-1], dtype_name(case.dtype), route)


def _exported(case: Case, route: str, cache: dict) -> _Exported:
    """Export the case's module by ``route`` once per run (op: a lone Norm with the case's weights)."""
    key = _export_key(case, route)
    if key not in cache:
        if isinstance(case, OpCase):
            module = Norm(case.hidden, impl="fused", eps=case.eps).to(case.dtype)
            with torch.no_grad():
                module.weight.copy_(case.weight)
                module.bias.copy_(case.bias)
        else:
            module = case.model("fused")
        example = torch.randn(_EXPORT_BATCH, _EXPORT_SEQ, case.shape[-1]).to(case.dtype)
        path = case.workdir / f"ort-{'-'.join(str(k) for k in key[1:])}.onnx"
        result = export_model(module, example, route, path)
        cache[key] = _Exported(result.path, result.seconds)
    return cache[key]


def _norm_nodes(optimized: Path) -> str:
    counts = collections.Counter(n.op_type for n in onnx.load(optimized, load_external_data=False).graph.node)
    found = [f"{t} x{counts[t]}" for t in _NORM_NODE_TYPES if counts[t]]
    return ", ".join(found) or "no norm-related nodes"


@register
class Ort:
    name = "ort"
    workloads = frozenset({"op", "model"})
    devices = frozenset({"cpu"})
    order = 40

    def __init__(self) -> None:
        self._exports: dict = {}  # _export_key -> _Exported: one export per run and module
        self._notes: dict = {}  # (_export_key, mode) -> what ORT runs after optimisation

    def variants(self, case: Case) -> list[Variant]:
        if case.dtype in _UNSUPPORTED_DTYPES:
            raise Unsupported(_UNSUPPORTED_DTYPES[case.dtype])
        return [Variant(f"{route}-{mode}", self._prepare(case, route, mode)) for route in ROUTES for mode in ("run", "iobinding")]

    def _prepare(self, case: Case, route: str, mode: str):
        def prepare() -> Prepared:
            cached = _export_key(case, route) in self._exports
            exported = _exported(case, route, self._exports)
            note_key = (_export_key(case, route), mode)
            # The optimised graph is written once (first round) to read what ORT fused; later rounds reuse the note.
            optimized = None if note_key in self._notes else exported.path.with_name(exported.path.stem + f".optimized-{mode}.onnx")
            config = OrtConfig(threads=torch.get_num_threads(), register_custom_ops=route == "custom", optimized_model_path=optimized)
            try:
                session = create_session(exported.path, config)
            except OrtNotImplemented as error:  # e.g. no float64 Erf kernel on the CPU provider
                raise Unsupported(f"ONNX Runtime has no kernel for this: {str(error).split(' : ')[-1]}") from error
            if optimized is not None:
                self._notes[note_key] = f"{_norm_nodes(optimized)} after ORT optimisation; setup = export {exported.seconds:.1f} s + session"
            note = self._notes[note_key]
            feeds = {session.get_inputs()[0].name: case.x.numpy()}
            reused = exported.seconds if cached else 0.0
            if mode == "run":
                return Prepared(lambda: session.run(None, feeds), note, reused)
            runner = IOBoundRunner(session)
            for buffer in runner.run(feeds):  # binds the reused outputs; NaN them so verification proves they are rewritten
                buffer.fill(float("nan"))
            return Prepared(lambda: runner.run(feeds), note + "; outputs bound once and reused", reused)

        return prepare
