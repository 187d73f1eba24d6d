"""bench.experiments.thread_sweep: each count times the same checked buffers; ratios to the first count; options."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from bench.experiments import thread_sweep
from bench.measure.verify import VerificationError


def test_a_sweep_times_every_count_and_variant_and_restores_the_thread_count(tmp_path):
    before = torch.get_num_threads()
    thread_sweep.main(["--shapes", "2x8x96,3x40", "--threads", "2,1", "--reps", "3", "--out", str(tmp_path)])
    assert torch.get_num_threads() == before
    frame = pd.read_csv(tmp_path / "thread_sweep.csv")
    assert list(frame["shape"]) == ["2x8x96"] * 4 + ["3x40"] * 4
    assert list(frame.elements) == [1536] * 4 + [120] * 4
    assert list(frame.threads) == [2, 2, 1, 1] * 2 and list(frame.variant) == ["out", "call"] * 4
    assert (frame.median_us > 0).all() and (frame.reps == 3).all() and (frame.calls_per_block >= 1).all()
    # The first count is the reference: its ratios are exactly 1; the others are medians of per-repetition ratios.
    first = frame[frame.threads == 2]
    assert (first.ratio_to_first == 1.0).all() and (first.ratio_q25 == 1.0).all() and (first.ratio_q75 == 1.0).all()
    other = frame[frame.threads == 1]
    assert ((other.ratio_q25 <= other.ratio_to_first) & (other.ratio_to_first <= other.ratio_q75)).all()
    assert (other.ratio_to_first > 0).all()
    table = (tmp_path / "thread_sweep.md").read_text()
    assert table.count("\n") == 2 + 8 and "| 3x40 | 120 | call | 1 |" in table


def test_a_wrong_output_stops_the_sweep_before_timing(monkeypatch):
    # A kernel that skips the last element at some thread count must be caught, not timed.
    real = torch.ops.myops.fused_norm_out.default

    def skips_last_on_two_threads(x, weight, bias, eps, out):
        real(x, weight, bias, eps, out)
        if torch.get_num_threads() == 2:
            out.view(-1)[-1] = float("nan")

    class Ops:
        fused_norm_out = type("O", (), {"default": staticmethod(skips_last_on_two_threads)})
        fused_norm = torch.ops.myops.fused_norm

    monkeypatch.setattr(torch.ops, "myops", Ops)
    with pytest.raises(VerificationError, match="fused_norm_out at 2 threads: 1 of 64 outputs are not finite"):
        thread_sweep.sweep((2, 32), [1, 2], reps=1)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shapes", "8x0x3"], "--shapes must be positive integers"),
        (["--shapes", ","], "--shapes must be a comma list"),
        (["--threads", "1"], "--threads must be at least two distinct integers >= 1"),
        (["--threads", "1,1"], "--threads must be at least two distinct"),
        (["--threads", "0,2"], "--threads must be at least two distinct"),
        (["--threads", "1,two"], "--threads must be a comma list of integers"),
        (["--reps", "0"], "--reps must be an integer >= 1"),
    ],
)
def test_bad_options_are_named_and_write_nothing(tmp_path, argv, message):
    with pytest.raises(ValueError, match=message):
        thread_sweep.main(["--reps", "1", "--out", str(tmp_path), *argv])
    assert not any(tmp_path.iterdir())
