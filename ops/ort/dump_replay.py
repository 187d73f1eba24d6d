"""Replay a debug dump of the ORT custom op through the PyTorch op and report the elementwise differences.

The ORT library writes one folder per call when its debug dump is on (see
csrc/ort/ort_debug_dump.h: session config entry ``myops.fused_norm.dump_dir``
or ``FUSEDBENCH_ORT_DUMP_DIR``):

    DUMP/<node>__p<pid>k<kernel>/call-000001/{x,weight,bias,y,epsilon}.npy + meta.json

Each call's x, weight, bias and epsilon go through ``torch.ops.myops.fused_norm``
and ORT's y is compared with its result; a ``fused_add_norm`` call (meta.json's
"op", with residual.npy and s.npy) goes through ``torch.ops.myops.fused_add_norm``
and both its outputs are compared. Both sides run the same kernel core,
so they should agree within the fused kernel's tolerance for the dtype
(ops/reference.py); the first call that does not is where a deployed graph
went wrong.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ops.dtypes import BY_NAME
from ops.reference import TOLERANCES


class DumpError(ValueError):
    """The folder is not a debug dump (or a call in it is incomplete); the message says what is wrong."""


@dataclass(frozen=True)
class CallReplay:
    node: str
    call: int
    dtype: str
    shape: tuple[int, ...]
    epsilon: float
    max_abs: float
    max_rel: float
    outside: int  # elements outside rtol/atol (NaN only where both are NaN counts as equal)
    elements: int  # of every output compared (fused_add_norm: the norm's and the sum's)
    op: str = "fused_norm"

    @property
    def agrees(self) -> bool:
        return self.outside == 0


def _load(folder: Path, name: str, dtype: str) -> torch.Tensor:
    array = np.load(folder / f"{name}.npy", allow_pickle=False)
    if dtype == "bfloat16":
        return torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(array.copy())


def call_folders(dump: Path) -> list[Path]:
    """Every complete call folder, ordered by node folder then call number."""
    dump = Path(dump)
    if not dump.is_dir():
        raise DumpError(
            f"{dump}: no such folder - pass the folder given as myops.fused_norm.dump_dir / FUSEDBENCH_ORT_DUMP_DIR"
        )
    calls = sorted(p.parent for p in dump.glob("*/call-*/meta.json"))
    if not calls:
        raise DumpError(
            f"{dump}: holds no dumped calls (<node>/call-NNNNNN/meta.json); "
            f"was the dump on when the session was created?"
        )
    return calls


def replay_call(folder: Path) -> CallReplay:
    import ops  # noqa: F401  (loads torch.ops.myops)

    try:
        meta = json.loads((folder / "meta.json").read_text())
        dtype, op = meta["dtype"], meta.get("op", "fused_norm")
        x, weight, bias, y = (_load(folder, n, dtype) for n in ("x", "weight", "bias", "y"))
        epsilon = float(np.load(folder / "epsilon.npy"))
        residual, s = (_load(folder, n, dtype) for n in ("residual", "s")) if op == "fused_add_norm" else (None, None)
    except (OSError, KeyError, ValueError) as error:
        raise DumpError(f"{folder}: not a complete dumped call ({error})") from error
    if dtype not in BY_NAME:
        raise DumpError(f"{folder}: dtype {dtype!r} is not one the op supports ({', '.join(BY_NAME)})")
    if op not in ("fused_norm", "fused_add_norm"):
        raise DumpError(f"{folder}: op {op!r} is not one of the library's (fused_norm, fused_add_norm)")
    if residual is None:
        got, want = y.double(), torch.ops.myops.fused_norm(x, weight, bias, epsilon).double()
    else:
        # Both outputs, as one comparison: the norm and the sum side by side.
        expected_y, expected_s = torch.ops.myops.fused_add_norm(x, residual, weight, bias, epsilon)
        got = torch.stack([y.double(), s.double()])
        want = torch.stack([expected_y.double(), expected_s.double()])
    tolerance = TOLERANCES[BY_NAME[dtype].torch]
    both_nan = got.isnan() & want.isnan()
    diff = (got - want).abs().masked_fill(both_nan, 0.0)
    close = (diff <= tolerance.bound(want)) | both_nan
    rel = diff / want.abs().clamp_min(torch.finfo(torch.float64).tiny)
    finite = ~(got.isnan() | want.isnan())
    return CallReplay(
        node=folder.parent.name,
        call=int(meta["call"]),
        dtype=dtype,
        shape=tuple(x.shape),
        epsilon=epsilon,
        max_abs=float(diff[finite].max()) if finite.any() else math.nan,
        max_rel=float(rel[finite].max()) if finite.any() else math.nan,
        outside=int((~close).sum()),
        elements=got.numel(),
        op=op,
    )


def replay(dump: Path) -> list[CallReplay]:
    return [replay_call(folder) for folder in call_folders(dump)]


def print_replay(results: list[CallReplay]) -> int:
    """Print one line per call; return how many calls disagree."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="debug dump replayed through the torch ops (ORT's outputs vs torch's)")
    for name in ("op", "node", "call", "dtype", "shape", "epsilon", "max abs", "max rel", "outside tol", "agrees"):
        table.add_column(name, justify="left" if name in ("op", "node", "dtype") else "right")
    for r in results:
        table.add_row(
            r.op,
            r.node,
            str(r.call),
            r.dtype,
            "x".join(map(str, r.shape)),
            f"{r.epsilon:.3g}",
            f"{r.max_abs:.3g}",
            f"{r.max_rel:.3g}",
            f"{r.outside}/{r.elements}",
            "yes" if r.agrees else "[red]NO[/]",
        )
    Console(width=None if Console().is_terminal else 200).print(table)  # logs: wide enough for the table
    return sum(not r.agrees for r in results)
