"""Export a module that uses the fused op to ONNX by one route, then check the file.

    export_model(module, example_input, route, path)          # any module: the model or one Norm
    export_model(norm, (x, residual), route, path)             # one norm with its residual: two inputs, two outputs
    export_routes("all", out_dir)                              # ``invoke export``

The module's norms must be ``Norm(impl="fused")`` or ``"fused_add"``: the
routes are translations of ``torch.ops.myops.fused_norm`` and
``fused_add_norm``. Every dim but the last is exported dynamic (named
``batch``, ``seq``, ...). Inputs are named ``x`` (and ``residual``), outputs
``y`` (and ``s``, the sum of a module that returns it). The file is written only
after it passes the post-export checks (ops/onnx/checks.py); a file that fails
them is kept beside it as ``<name>.rejected.onnx`` for inspection.

The dynamo exporter (``torch.onnx.export(dynamo=True)``) is the default. The
deprecated TorchScript exporter (``dynamo=False``) is kept for users still on
it; it writes opset 20 at most, so it has no ``opset23`` route.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import onnx
import torch
from torch import Tensor, nn

import ops  # noqa: F401  (loads the op library: torch.ops.myops.fused_norm must exist to be translated)
from ops._files import atomic_path
from ops._paths import build_dir
from ops.norms import Norm
from ops.onnx.checks import CheckReport, ExportCheckError, check_export, norm_paths_of
from ops.onnx.routes import (
    CUSTOM_ADD_OP_TYPE,
    CUSTOM_DOMAIN,
    CUSTOM_DOMAIN_VERSION,
    CUSTOM_OP_TYPE,
    Route,
    get_route,
    parse_routes,
)
from ops.onnx.summary import format_summary

if TYPE_CHECKING:
    from ops.model import ModelConfig

INPUT_NAME, OUTPUT_NAME = "x", "y"
INPUT_NAMES, OUTPUT_NAMES = (INPUT_NAME, "residual"), (OUTPUT_NAME, "s")
FUSED_IMPLS = ("fused", "fused_add")  # the impls whose norms are the ops the routes translate
_DIM_NAMES = ("batch", "seq")
# The TorchScript exporter looks a custom-namespace symbolic up at the version
# `custom_opsets` gives its domain (1 for myops), not at the export's opset:
# registered at opset 20 it is "not supported in opset 1". Registering from
# version 1 on serves every opset.
_SYMBOLIC_FROM_OPSET = 1


class ExportError(RuntimeError):
    """The module cannot be exported by the asked route; the message says why and what to do."""


@dataclass
class ExportResult:
    path: Path
    route: Route
    exporter: str  # "dynamo" | "torchscript"
    report: CheckReport
    seconds: float
    summary: str

    @property
    def norm_count(self) -> int:
        return len(self.report.norm_paths)


def export_model(
    module: nn.Module,
    example_input: Tensor | tuple[Tensor, ...],
    route: str | Route,
    path: Path | str,
    dynamo: bool = True,
) -> ExportResult:
    """Export ``module`` (eval mode) by ``route`` to ``path``; check the file; return what was written.

    ``example_input``: one tensor, or a tuple (x, residual) for a module called with both.
    """
    route = get_route(route) if isinstance(route, str) else route
    inputs = example_input if isinstance(example_input, tuple) else (example_input,)
    _check_exportable(module, inputs, route, dynamo)
    path = Path(path)
    # torch.export swaps the module's parameters for fake tensors while it traces: an export of the same module
    # in another thread, running it or reading its parameters in that window, would meet them. Exports take turns.
    with _EXPORT_LOCK:
        module = module.eval()
        with torch.no_grad():
            produced = module(*inputs)
        names = _Names(INPUT_NAMES[: len(inputs)], OUTPUT_NAMES[: len(produced) if isinstance(produced, tuple) else 1])
        start = time.perf_counter()
        with _quiet_exporter(), _torchlib_registry_reused():
            export = _export_dynamo if dynamo else _export_torchscript
            model = export(module, inputs, route, names)
        seconds = time.perf_counter() - start
        exporter = "dynamo" if dynamo else "torchscript"
        _stamp(model, route, exporter, norm_paths_of(module))
        try:
            report = check_export(model, route, module, list(names.inputs))
        except ExportCheckError as error:
            rejected = path.with_name(path.stem + ".rejected.onnx")
            _save(model, rejected)
            raise ExportCheckError(f"{error}\n(the rejected file is kept at {rejected})") from None
    _save(model, path)
    return ExportResult(path, route, exporter, report, seconds, format_summary(model, report, path, exporter))


@dataclass(frozen=True)
class _Names:
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def _check_exportable(module: nn.Module, inputs: tuple, route: Route, dynamo: bool) -> None:
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if not 1 <= len(inputs) <= len(INPUT_NAMES) or not all(isinstance(t, Tensor) and t.dim() >= 1 for t in inputs):
        raise ValueError(
            "example_input must be a tensor with at least 1 dim (the normalised last one), or a tuple (x, residual) "
            "of two such tensors"
        )
    if len(inputs) == 2 and inputs[0].shape != inputs[1].shape:
        raise ValueError(f"x and residual must have one shape, got {list(inputs[0].shape)} and {list(inputs[1].shape)}")
    example_input = inputs[0]
    norms = {name or "(module)": m.impl for name, m in module.named_modules() if isinstance(m, Norm)}
    if not norms:
        raise ExportError(
            "module contains no ops.norms.Norm: the routes translate the fused norm op, there is nothing to route"
        )
    not_fused = {name: impl for name, impl in norms.items() if impl not in FUSED_IMPLS}
    if not_fused:
        raise ExportError(
            f"every Norm must use impl='fused' or 'fused_add' (the routes translate torch.ops.myops.fused_norm and "
            f"fused_add_norm); these do not: {not_fused} - build the module with one of them "
            "(ops.model.with_norm_impl)"
        )
    small = [axis for axis, size in enumerate(example_input.shape[:-1]) if size < 2]
    if small:
        raise ValueError(
            f"example_input dims {small} have size {[example_input.shape[a] for a in small]}: use sizes >= 2 for "
            f"the dynamic dims (torch.export specialises sizes 0 and 1 to constants)"
        )
    if not dynamo and route.torchscript_symbolic is None:
        raise ExportError(f"route {route.name!r} has no TorchScript-exporter form: {route.torchscript_unavailable}")
    if not dynamo and "fused_add" in norms.values():
        # Its scopes name a norm called from outside its own block by the attribute name alone (/norm1, not
        # /blocks.1/norm1), so no check could tell which norm a node belongs to.
        raise ExportError(
            "impl 'fused_add' exports with the dynamo exporter only (the default): the TorchScript exporter does not "
            "record which norm the residual adds' nodes belong to"
        )


def _translations(route: Route) -> dict:
    return {
        torch.ops.myops.fused_norm.default: route.dynamo_translation,
        torch.ops.myops.fused_add_norm.default: route.add_dynamo_translation,
    }


def _dynamic_dim_names(rank: int) -> list[str]:
    return [_DIM_NAMES[a] if a < len(_DIM_NAMES) else f"d{a}" for a in range(rank - 1)]


def _export_dynamo(module: nn.Module, inputs: tuple, route: Route, names: _Names) -> onnx.ModelProto:
    # One Dim object per axis name, shared by every input: x and residual have one shape.
    dims = {axis: torch.export.Dim(name) for axis, name in enumerate(_dynamic_dim_names(inputs[0].dim()))}
    program = torch.onnx.export(
        module,
        inputs,
        dynamo=True,
        opset_version=route.opset,
        custom_translation_table=_translations(route),
        dynamic_shapes=tuple(dims for _ in inputs),
        input_names=list(names.inputs),
        output_names=list(names.outputs),
        optimize=True,  # folds constant work (e.g. the transposes of Linear weights) into initializers
        verbose=False,
    )
    return program.model_proto


def _export_torchscript(module: nn.Module, inputs: tuple, route: Route, names: _Names) -> onnx.ModelProto:
    dims = dict(enumerate(_dynamic_dim_names(inputs[0].dim())))
    buffer = io.BytesIO()
    symbolics = {
        f"{CUSTOM_DOMAIN}::{CUSTOM_OP_TYPE}": route.torchscript_symbolic,
        f"{CUSTOM_DOMAIN}::{CUSTOM_ADD_OP_TYPE}": route.add_torchscript_symbolic,
    }
    registered = [name for name, symbolic in symbolics.items() if symbolic is not None]
    for name in registered:
        torch.onnx.register_custom_op_symbolic(name, symbolics[name], _SYMBOLIC_FROM_OPSET)
    try:
        torch.onnx.export(
            module,
            inputs,
            buffer,
            dynamo=False,
            opset_version=route.opset,
            input_names=list(names.inputs),
            output_names=list(names.outputs),
            dynamic_axes={name: dims for name in (*names.inputs, *names.outputs)},
            custom_opsets={CUSTOM_DOMAIN: CUSTOM_DOMAIN_VERSION} if route.custom_domain else None,
            do_constant_folding=True,
        )
    finally:
        for name in registered:
            torch.onnx.unregister_custom_op_symbolic(name, _SYMBOLIC_FROM_OPSET)
    return onnx.load_from_string(buffer.getvalue())


# The dynamo exporter's registry of torchlib functions, per opset, as first built in this process.
_TORCHLIB_REGISTRIES: dict[int, object] = {}
# Held through an export (the module's use, the registry builder's replacement): an export in another thread waits.
_EXPORT_LOCK = threading.RLock()


@contextlib.contextmanager
def _torchlib_registry_reused() -> Iterator[None]:
    """Build the dynamo exporter's registry of torchlib functions once per opset and process, not once per export.

    torch.onnx.export builds it anew on every call, parsing the source of each of about 500 functions again:
    0.4 s of every export after the first (0.7 s the first), more than tracing a norm takes, and a benchmark
    run exports dozens of models. Each export gets its own copy of the lists (it registers the route's
    translations into them); the functions themselves are shared, as every build makes the same ones.
    """
    from torch.onnx._internal.exporter import _registration

    registry_class = _registration.ONNXRegistry
    with _EXPORT_LOCK:
        build = registry_class.__dict__["from_torchlib"]

        def reused(cls, opset_version=_registration._constants.TORCHLIB_OPSET):
            if opset_version not in _TORCHLIB_REGISTRIES:
                _TORCHLIB_REGISTRIES[opset_version] = build.__func__(cls, opset_version=opset_version)
            built = _TORCHLIB_REGISTRIES[opset_version]
            copy = cls()
            copy._opset_version = built._opset_version
            copy.functions = {target: list(decompositions) for target, decompositions in built.functions.items()}
            return copy

        registry_class.from_torchlib = classmethod(reused)
        try:
            yield
        finally:
            registry_class.from_torchlib = build


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """Silence the exporters' chatter (torchvision notices, deprecation warnings); errors still raise."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=DeprecationWarning)
            warnings.simplefilter("ignore", category=FutureWarning)
            # x and residual share their dims on purpose: the exporter notes that it keeps one name for each.
            warnings.filterwarnings("ignore", message=".*shares the same shape constraints with another axis")
            yield
    finally:
        logger.setLevel(level)


def _stamp(model: onnx.ModelProto, route: Route, exporter: str, norm_paths: list[str]) -> None:
    """Record in the file which route and exporter made it and where its norms are (for alignment)."""
    stamps = {
        "fusedbench.route": route.name,
        "fusedbench.exporter": exporter,
        "fusedbench.norms": json.dumps(norm_paths),
    }
    kept = [p for p in model.metadata_props if p.key not in stamps]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    for key, value in stamps.items():
        model.metadata_props.add(key=key, value=value)


def _save(model: onnx.ModelProto, path: Path) -> None:
    with atomic_path(path) as tmp:
        onnx.save_model(model, tmp)


# --- invoke export ---------------------------------------------------------------


def default_onnx_dir() -> Path:
    return build_dir() / "onnx"


def export_routes(
    routes: str = "all",
    out_dir: Path | str | None = None,
    torchscript: bool = False,
    config: ModelConfig | None = None,
    seed: int = 0,
    impl: str = "fused",
) -> list[ExportResult]:
    """Export the sequence model by each route into ``out_dir``; print each file's summary.

    ``impl``: its norms, ``fused`` or ``fused_add`` (residual adds folded into the norms; files named
    ``<route>.fused_add.onnx``).
    """
    from ops.model import build_model, example_input  # ``example_input`` is also export_model's parameter

    if impl not in FUSED_IMPLS:
        raise ValueError(f"--impl must be one of {', '.join(FUSED_IMPLS)}, got {impl!r}")
    selected = parse_routes(routes)
    if torchscript:
        unavailable = [r for r in selected if r.torchscript_symbolic is None]
        if unavailable and routes.strip() != "all":
            raise ExportError("; ".join(f"route {r.name!r}: {r.torchscript_unavailable}" for r in unavailable))
        for r in unavailable:
            print(f"{r.name}: not exported with --torchscript ({r.torchscript_unavailable})")
        selected = [r for r in selected if r.torchscript_symbolic is not None]
    out = Path(out_dir) if out_dir is not None else default_onnx_dir()
    model = build_model(impl, config, seed=seed)
    x = example_input(2, 16, model.config.d_model)
    results = []
    for route in selected:
        suffix = (".torchscript.onnx" if torchscript else ".onnx") if impl == "fused" else f".{impl}.onnx"
        result = export_model(model, x, route, out / f"{route.name}{suffix}", dynamo=not torchscript)
        print(result.summary)
        print(f"  checks passed; exported in {result.seconds:.1f} s\n", flush=True)
        results.append(result)
    return results
