"""The op's outputs do not depend on how the CPU kernel stores them.

Where x and y together outgrow the last-level cache, the CPU kernel writes y
with streaming (non-temporal) stores, which bypass the caches and are weakly
ordered: each task ends with a store fence before the thread pool joins.
FUSED_NORM_LLC_BYTES, read once per process, sets the cache size the kernel
assumes; at 1 byte the out variant streams wherever its rows are whole cache
lines, aligned or not (allocating calls and in-place forms never stream: a fresh output's
pages come zeroed into the cache, and in place each line of y was just read
as x). Two child processes run every form on the same inputs at 2 threads,
one at that setting and one at a cache of 1 PiB; every output must match bit
for bit, and the float64 reference. (tests/csrc/test_cpu_versions.py checks,
in the core alone, that the streamed problems are the ones expected.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import torch

from ops.dtypes import TORCH_DTYPES
from ops.reference import TOLERANCES, make_inputs, reference_norm

# 64 x 1024: two tasks of 32768 elements (so both threads store), rows of whole lines in every dtype, and an
# odd row length whose rows are not (those keep ordinary stores in either child).
SHAPES = ((64, 1024), (64, 1000))

CHILD = textwrap.dedent(
    """
    import sys
    import torch
    import ops

    torch.set_num_threads(2)
    cases = torch.load(sys.argv[1])
    results = []
    for x, r, w, b in cases:
        out = torch.full_like(x, float("nan"))
        ops.fused_norm_out(x, w, b, 1e-6, out)
        # An output 3 elements into its storage: rows start inside a cache line.
        shifted = torch.full((x.numel() + 3,), float("nan"), dtype=x.dtype)[3:].view(x.shape)
        ops.fused_norm_out(x, w, b, 1e-6, shifted)
        y_add, s_add = ops.fused_add_norm(x, r, w, b, 1e-6)
        x_in, r_in = x.clone(), r.clone()
        ops.fused_add_norm_inplace(x_in, r_in, w, b, 1e-6)
        results.append((ops.fused_norm(x, w, b, 1e-6), out, shifted, y_add, s_add, x_in, r_in))
    torch.save(results, sys.argv[2])
    """
)


def _run_child(cases_path, out_path, llc_bytes: int) -> list:
    env = {**os.environ, "FUSED_NORM_LLC_BYTES": str(llc_bytes)}
    subprocess.run([sys.executable, "-c", CHILD, str(cases_path), str(out_path)], check=True, env=env)
    return torch.load(out_path)


def test_streamed_outputs_equal_ordinary_stores_bit_for_bit(tmp_path, generator):
    cases = []
    for dtype in TORCH_DTYPES:
        for shape in SHAPES:
            x, w, b = make_inputs(shape, dtype, generator)
            r = make_inputs(shape, dtype, generator)[0]
            cases.append((x, r, w, b))
    torch.save(cases, tmp_path / "cases.pt")
    streamed = _run_child(tmp_path / "cases.pt", tmp_path / "streamed.pt", 1)
    ordinary = _run_child(tmp_path / "cases.pt", tmp_path / "ordinary.pt", 2**50)
    for (x, r, w, b), got, want in zip(cases, streamed, ordinary, strict=True):
        where = f"{x.dtype} {tuple(x.shape)}"
        for name, a, e in zip(
            ("call", "out", "shifted out", "add y", "add sum", "in-place y", "in-place sum"), got, want, strict=True
        ):
            assert not a.isnan().any(), f"{where} {name}: some elements were never written"
            assert torch.equal(a, e), f"{where} {name}: streamed bits differ from ordinary stores"
        tolerance = TOLERANCES[x.dtype].as_kwargs()
        torch.testing.assert_close(got[1].double(), reference_norm(x, w, b, 1e-6), **tolerance)
        assert torch.equal(got[2], got[1]), f"{where}: the shifted output differs from the aligned one"
        assert torch.equal(got[4], x + r), f"{where}: the add's sum is not x + residual"
        torch.testing.assert_close(got[3].double(), reference_norm(got[4], w, b, 1e-6), **tolerance)
