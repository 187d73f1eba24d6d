"""``invoke align``: numerical alignment of PyTorch and ONNX Runtime, per route.

For each route, on the op alone (``Norm``, several hidden sizes including odd
ones, each dtype) and on the sequence model (float32), at several batch sizes
and sequence lengths:

  1. draw a realistic input (ops.model.example_input: offsets, per-feature
     scales, outlier features) and save it to ``build/alignment/inputs/*.npz``;
  2. PyTorch (the fused op) and ORT each read that same file;
  3. print max abs error, max relative error and cosine similarity per case,
     and fail past the dtype's tolerance (ops/reference.py says why each
     tolerance is what it is).

With ``layers=True`` each block's output becomes an extra graph output and is
compared too; the report names the first block where the two sides diverge.
Nothing is skipped: a route that cannot run (the custom library not built,
say) fails with the reason.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import torch

from ops._files import atomic_path
from ops._paths import build_dir
from ops.alignment.layers import block_output_names, torch_block_outputs, with_extra_outputs
from ops.alignment.metrics import Comparison, compare
from ops.dtypes import BY_NAME, dtype_name, parse_dtypes
from ops.model import SequenceModel, build_model, build_norm, example_input
from ops.onnx.export import export_model
from ops.onnx.routes import Route, parse_routes
from ops.reference import ALIGNMENT_TOLERANCES, MODEL_ALIGNMENT_TOLERANCE, Tolerance

# Hidden sizes of the op: powers of two, a transformer width and its odd
# neighbour, and an odd size just past 4K (vector tails, row blocking).
OP_HIDDEN_SIZES = (64, 127, 768, 769, 4097)
# (batch, seq): one token, a small odd batch, a long sequence.
OP_SHAPES = ((1, 1), (3, 7), (4, 128))
MODEL_SHAPES = ((1, 1), (2, 16), (3, 77), (8, 128))
_EXAMPLE_SHAPE = (2, 8)  # export-time example (dims >= 2 stay dynamic)


class AlignmentError(RuntimeError):
    """PyTorch and ORT disagree beyond tolerance; the message lists the failing cases."""


@dataclass
class Case:
    level: str  # "op" | "model" | "block i"
    route: str
    dtype: str
    hidden: int
    shape: tuple[int, int]
    tolerance: Tolerance
    result: Comparison
    input_file: Path


@dataclass
class AlignmentReport:
    cases: list[Case] = field(default_factory=list)
    first_divergent_block: dict[str, str] = field(default_factory=dict)  # route -> "block i" or ""

    @property
    def failures(self) -> list[Case]:
        return [c for c in self.cases if not c.result.passed]


def default_alignment_dir() -> Path:
    return build_dir() / "alignment"


def _session(model: Path | bytes, route: Route, optimization: str):
    from ops.ort.session import OrtConfig, create_session

    return create_session(model, OrtConfig(optimization=optimization, register_custom_ops=route.custom_domain))


def _save_input(path: Path, x: torch.Tensor) -> Path:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, x=x.numpy())
    return path


def load_input(path: Path) -> np.ndarray:
    with np.load(path) as data:
        return data["x"]


def save_inputs(
    out: Path, tag: str, hidden: int, dtype: str, shapes: Iterable[tuple[int, int]], seed: int
) -> list[Path]:
    """One saved input file per shape; both sides read these files, never the tensors in memory."""
    files = []
    for batch, seq in shapes:
        # crc32, not hash(): str hashes are salted per process, the inputs must not be.
        g = torch.Generator().manual_seed(zlib.crc32(f"{seed}/{tag}/{hidden}/{dtype}/{batch}x{seq}".encode()))
        x = example_input(batch, seq, hidden, g, BY_NAME[dtype].torch)
        files.append(_save_input(out / "inputs" / f"{tag}_h{hidden}_{dtype}_{batch}x{seq}.npz", x))
    return files


def _op_cases(route: Route, out: Path, dtypes, hidden_sizes, shapes, optimization: str, seed: int) -> list[Case]:
    cases = []
    for dtype in dtypes:
        for hidden in hidden_sizes:
            norm = build_norm(hidden, "fused", seed=seed + hidden, dtype=BY_NAME[dtype].torch)
            example = example_input(*_EXAMPLE_SHAPE, hidden, dtype=BY_NAME[dtype].torch)
            exported = export_model(norm, example, route, out / "onnx" / f"op_{route.name}_h{hidden}_{dtype}.onnx")
            session = _session(exported.path, route, optimization)
            for file in save_inputs(out, "op", hidden, dtype, shapes, seed):
                x = load_input(file)
                with torch.no_grad():
                    reference = norm(torch.from_numpy(x)).numpy()
                actual = session.run(None, {"x": x})[0]
                tol = ALIGNMENT_TOLERANCES[BY_NAME[dtype].torch]
                cases.append(
                    Case("op", route.name, dtype, hidden, x.shape[:2], tol, compare(actual, reference, tol), file)
                )
    return cases


def _model_cases(
    route: Route,
    out: Path,
    shapes,
    optimization: str,
    layers: bool,
    seed: int,
    report: AlignmentReport,
    impl: str = "fused",
) -> list[Case]:
    model = build_model(impl, seed=seed)
    hidden = model.config.d_model
    exported = export_model(
        model, example_input(*_EXAMPLE_SHAPE, hidden), route, out / "onnx" / f"model_{route.name}.onnx"
    )
    files = save_inputs(out, "model", hidden, "float32", shapes, seed)
    cases, first = align_model_file(route, onnx.load(exported.path), model, files, optimization, layers)
    if layers:
        report.first_divergent_block[route.name] = first
    return cases


def align_model_file(
    route: Route,
    onnx_model: onnx.ModelProto,
    model: SequenceModel,
    input_files: list[Path],
    optimization: str = "all",
    layers: bool = False,
) -> tuple[list[Case], str]:
    """Compare ``onnx_model`` in ORT with ``model`` on each saved input; with ``layers``, block by block too.

    Returns the cases and the first block outside tolerance ("block i"; "" if none or not ``layers``).
    """
    names = block_output_names(onnx_model, model.config.layers) if layers else []
    session = _session(with_extra_outputs(onnx_model, names).SerializeToString(), route, optimization)
    hidden = model.config.d_model
    cases: list[Case] = []
    divergent: set[int] = set()  # blocks outside tolerance for some input
    for file in input_files:
        x = load_input(file)
        reference, blocks = torch_block_outputs(model, torch.from_numpy(x))
        outputs = session.run(None, {"x": x})
        shape = x.shape[:2]
        cases.append(
            Case(
                "model",
                route.name,
                "float32",
                hidden,
                shape,
                MODEL_ALIGNMENT_TOLERANCE,
                compare(outputs[0], reference.numpy(), MODEL_ALIGNMENT_TOLERANCE),
                file,
            )
        )
        for block, (actual, expected) in enumerate(zip(outputs[1:], blocks, strict=True)):
            result = compare(actual, expected.numpy(), MODEL_ALIGNMENT_TOLERANCE)
            cases.append(
                Case(f"block {block}", route.name, "float32", hidden, shape, MODEL_ALIGNMENT_TOLERANCE, result, file)
            )
            if not result.passed:
                divergent.add(block)
    return cases, (f"block {min(divergent)}" if divergent else "")


def check_alignment(
    routes: str = "all",
    out_dir: Path | str | None = None,
    layers: bool = False,
    optimization: str = "all",
    dtypes: Iterable[str] = ("float32", "float16"),
    op_hidden_sizes: Iterable[int] = OP_HIDDEN_SIZES,
    op_shapes: Iterable[tuple[int, int]] = OP_SHAPES,
    model_shapes: Iterable[tuple[int, int]] = MODEL_SHAPES,
    seed: int = 0,
    echo: bool = True,
    impl: str = "fused",
) -> AlignmentReport:
    """Align every selected route; print the table; raise AlignmentError if any case fails.

    ``impl``: the model's norms, ``fused`` or ``fused_add`` (residual adds folded into the norms).
    """
    if impl not in ("fused", "fused_add"):
        raise ValueError(f"--impl must be fused or fused_add (the impls the routes export), got {impl!r}")
    dtypes, model_shapes = list(dtypes), list(model_shapes)
    aligned = tuple(dtype_name(d) for d in ALIGNMENT_TOLERANCES)
    dtypes = [d.name for d in parse_dtypes(",".join(dtypes), "--dtype", aligned)]
    out = Path(out_dir) if out_dir is not None else default_alignment_dir()
    report = AlignmentReport()
    for route in parse_routes(routes):
        report.cases += _op_cases(route, out, dtypes, list(op_hidden_sizes), list(op_shapes), optimization, seed)
        if model_shapes:
            report.cases += _model_cases(route, out, list(model_shapes), optimization, layers, seed, report, impl)
        if echo:
            print(
                format_table([c for c in report.cases if c.route == route.name], route.name, optimization), flush=True
            )
            if not layers:
                print(flush=True)
            if layers and model_shapes:
                first = report.first_divergent_block[route.name]
                print(
                    f"  {route.name}: "
                    + (f"first divergence at {first}" if first else "no block diverges beyond tolerance")
                    + "\n",
                    flush=True,
                )
    if echo:
        print(f"inputs saved under {out / 'inputs'}; exported files under {out / 'onnx'}")
    if report.failures:
        listed = "\n".join(f"  - {_case_text(c)}" for c in report.failures[:20])
        more = f"\n  ... and {len(report.failures) - 20} more" if len(report.failures) > 20 else ""
        blocks = "".join(f"\n  {r}: first divergence at {b}" for r, b in report.first_divergent_block.items() if b)
        hint = _known_cause(report.failures, optimization)
        raise AlignmentError(
            f"{len(report.failures)} of {len(report.cases)} cases outside tolerance:\n{listed}{more}{blocks}{hint}"
        )
    return report


def _known_cause(failures: list[Case], optimization: str) -> str:
    if optimization in ("extended", "all") and any(c.route == "standard" and c.dtype == "float64" for c in failures):
        return (
            "\nknown cause for standard/float64: ORT 1.31's SimplifiedLayerNormFusion gives the fused node its default "
            "epsilon 1e-5 instead of the graph's in float64 graphs; "
            "with --optimization basic nothing fuses and float64 aligns"
        )
    return ""


def _case_text(c: Case) -> str:
    r = c.result
    return (
        f"{c.route} {c.level} {c.dtype} h={c.hidden} {c.shape[0]}x{c.shape[1]}: max abs {r.max_abs:.3g}, "
        f"max rel {r.max_rel:.3g}, cosine {r.cosine:.12f} (atol {c.tolerance.atol:g}, rtol {c.tolerance.rtol:g}, "
        f"cosine >= {c.tolerance.min_cosine}); input {c.input_file}"
    )


def format_table(cases: list[Case], route: str, optimization: str) -> str:
    header = (
        f"{'level':<8} {'dtype':<8} {'hidden':>6} {'batch x seq':>11} {'max abs':>10} {'max rel':>10} "
        f"{'1 - cosine':>10} {'atol/rtol':>13}  result"
    )
    lines = [
        f"route {route} (ORT optimisation: {optimization}); max rel over |torch| >= atol/rtol",
        header,
        "-" * len(header),
    ]
    for c in cases:
        r = c.result
        lines.append(
            f"{c.level:<8} {c.dtype:<8} {c.hidden:>6} {f'{c.shape[0]} x {c.shape[1]}':>11} "
            f"{r.max_abs:>10.2e} {r.max_rel:>10.2e} "
            f"{max(0.0, 1 - r.cosine):>10.1e} "
            f"{f'{c.tolerance.atol:g}/{c.tolerance.rtol:g}':>13}  {'ok' if r.passed else 'FAIL'}"
        )
    return "\n".join(lines)
