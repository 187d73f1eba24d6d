"""bench/experiments/offset_sweep.py: outputs placed where asked, checked before timing, and its option checks."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from bench.experiments import offset_sweep
from bench.measure.placement import PAGE_BYTES, empty_at
from bench.measure.verify import VerificationError


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_empty_at_starts_where_asked_and_holds_the_shape(dtype):
    itemsize = torch.empty(0, dtype=dtype).element_size()
    for offset in (0, itemsize, 64, 2048 + itemsize, PAGE_BYTES - itemsize):
        t = empty_at((3, 5, 7), dtype, offset)
        assert t.data_ptr() % PAGE_BYTES == offset
        assert t.shape == (3, 5, 7) and t.is_contiguous() and t.dtype == dtype


def test_empty_at_refuses_an_offset_off_the_element_grid():
    with pytest.raises(ValueError, match="offset must be an int multiple of 4"):
        empty_at((4,), torch.float32, 2)
    with pytest.raises(ValueError, match=r"in \[0, 4096\)"):
        empty_at((4,), torch.float32, 4096)


def test_a_sweep_times_every_distance_at_that_distance(tmp_path):
    distances = [0, 64, 2050]  # 2050: not a multiple of 64, a multiple of bfloat16's 2 bytes
    offset_sweep.main(
        ["--shape", "3x16x96", "--dtype", "float32,bfloat16", "--distances", "0,64,2048", "--reps", "3"]
        + ["--out", str(tmp_path)]
    )
    frame = pd.read_csv(tmp_path / "offset_sweep.csv")
    assert list(frame.dtype) == ["float32"] * 3 + ["bfloat16"] * 3
    assert list(frame.distance_bytes) == [0, 64, 2048] * 2
    assert (frame.measured_distance_bytes == frame.distance_bytes).all()
    assert (frame.copy_ns_per_element > 0).all() and (frame.op_ns_per_element > 0).all()
    # The share is the median of per-repetition ratios, so it lies within what the medians allow.
    assert (frame.op_share_of_copy > 0).all() and (frame.reps == 3).all()
    table = (tmp_path / "offset_sweep.md").read_text()
    assert table.count("\n") == 2 + 6 and "| 3x16x96 | bfloat16 | 1 | 2048 |" in table

    odd = offset_sweep.sweep((2, 40), torch.bfloat16, distances, reps=1)
    assert list(odd.measured_distance_bytes) == distances


def test_a_wrong_output_stops_the_sweep_before_timing(monkeypatch):
    # A kernel that skips the last element must be caught by the check, not timed.
    real = torch.ops.myops.fused_norm_out.default

    def skips_last(x, weight, bias, eps, out):
        real(x, weight, bias, eps, out)
        out.view(-1)[-1] = float("nan")

    monkeypatch.setattr("ops.fused_norm_out", lambda x, w, b, eps, out: skips_last(x, w, b, eps, out))
    with pytest.raises(VerificationError, match="1 of 64 outputs are not finite"):
        offset_sweep.sweep((2, 32), torch.float32, [0], reps=1)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shape", "8x0x3"], "--shape must be positive integers"),
        (["--shape", "8,128"], "--shape must be positive integers"),
        (["--distances", "0,6"], r"--distances must be multiples of the element size \(4 bytes\)"),
        (["--distances", "0,4096"], "--distances must be multiples"),
        (["--distances", "a"], "--distances must be a comma list of integers"),
        (["--dtype", "int8"], "--dtype must be a comma list of"),
        (["--threads", "0"], "--threads must be an integer >= 1"),
    ],
)
def test_bad_options_are_named_and_write_nothing(tmp_path, argv, message):
    with pytest.raises(ValueError, match=message):
        offset_sweep.main(argv + ["--reps", "1", "--out", str(tmp_path)])
    assert not any(tmp_path.iterdir())
