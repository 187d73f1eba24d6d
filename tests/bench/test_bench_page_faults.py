"""Page faults and allocation: faults per call, the kernel's THP modes, the fresh-output copy limit, the flag."""

from __future__ import annotations

import io
import math

import pandas as pd
import pytest
import torch
from rich.console import Console

from bench.measure.allocator import cpu_allocator
from bench.measure.machine import minor_faults, snapshot, transparent_huge_pages
from bench.measure.timing import TimingConfig, measure, timer_resolution_ns
from bench.report.metrics import PAGE_FAULT_BOUND, add_ratios, fault_cost_us, page_fault_bound
from bench.report.schema import COLUMNS, to_frame
from bench.report.summary import page_fault_line, summary_table

PAGE = 4096
# Above glibc's largest dynamic mmap threshold (32 MiB): every allocation is a fresh mapping.
BIG = 64 * 2**20


def _huge_pages_possible() -> bool:
    modes = transparent_huge_pages()
    return modes.startswith("enabled=always") or (
        cpu_allocator().startswith("thp") and not modes.startswith("enabled=never")
    )


def _min_faults(nbytes: int) -> float:
    # Where torch's memory may get huge pages, the kernel serves a touched region in 2 MiB pages: 512x fewer faults.
    return nbytes / (2 * 2**20) if _huge_pages_possible() else 0.9 * nbytes / PAGE


def test_touching_fresh_memory_is_counted_in_page_faults(generator):
    # torch, not numpy: numpy asks for huge pages (madvise) for large arrays, torch only with THP_MEM_ALLOC_ENABLE=1.
    value = torch.rand(1, generator=generator).item()
    before = snapshot()
    fresh = torch.empty(BIG // 4)
    fresh.fill_(value)  # touches every page
    after = snapshot()
    assert minor_faults(before, after) >= _min_faults(BIG)
    again = snapshot()
    fresh.add_(1.0)  # the same pages: already mapped
    assert minor_faults(again, snapshot()) < 0.01 * BIG / PAGE


def test_faults_per_call_of_a_fresh_output_vs_a_preallocated_one(generator):
    x = torch.rand(BIG // 4, generator=generator)
    dst = torch.empty_like(x)
    config, resolution = TimingConfig(warmup=2, budget_s=0.01, min_samples=4), timer_resolution_ns()
    fresh = measure(x.clone, config, resolution)
    preallocated = measure(lambda: dst.copy_(x), config, resolution)
    assert fresh.calls == len(fresh.samples_us) * fresh.block >= 4
    assert fresh.minor_faults_per_call >= _min_faults(BIG)
    assert preallocated.minor_faults_per_call < 0.01 * BIG / PAGE


def test_transparent_huge_pages_modes_are_read_from_the_bracketed_choice(tmp_path):
    (tmp_path / "enabled").write_text("always [madvise] never\n")
    (tmp_path / "defrag").write_text("always defer defer+madvise [madvise] never\n")
    assert transparent_huge_pages(tmp_path) == "enabled=madvise defrag=madvise"
    (tmp_path / "enabled").write_text("[always] madvise never\n")
    assert transparent_huge_pages(tmp_path) == "enabled=always defrag=madvise"
    assert transparent_huge_pages(tmp_path / "missing") == "unknown"
    modes = transparent_huge_pages()  # this machine's, in the same form (or unknown without sysfs)
    assert modes == "unknown" or (modes.startswith("enabled=") and " defrag=" in modes)


def _row(workload, shape, baseline, variant, median_us, faults, bytes_moved=8e6):
    row = {name: {"string": "x", "int64": 1, "Int64": None, "float64": math.nan}[dtype] for name, dtype, _ in COLUMNS}
    row.update(
        workload=workload,
        shape=shape,
        dtype="float32",
        device="cpu",
        baseline=baseline,
        variant=variant,
        median_us=median_us,
        minor_faults_per_call=faults,
        bytes_moved=bytes_moved,
        gbps=bytes_moved / median_us / 1e3,
    )
    return row


@pytest.fixture
def run_frame():
    # A large shape: the fresh copy takes 2000 more pages (4 KiB each) than the preallocated one
    # and 1000 µs more: 0.5 µs per fault. A small shape faults too little to say anything.
    rows = [
        _row("limit", "big", "copy", "into_preallocated", 500.0, 0.0),
        _row("limit", "big", "copy", "fresh_output", 1500.0, 2000.0),
        _row("limit", "small", "copy", "into_preallocated", 1.0, 0.0, 1e4),
        _row("limit", "small", "copy", "fresh_output", 3.0, 1.0, 1e4),
        _row("op", "big", "fused", "call", 1600.0, 2000.0),  # 2000 x 0.5 = 1000 of 1600 µs: page-fault bound
        _row("op", "big", "fused", "out", 600.0, 0.0),
        _row("op", "big", "unfused", "call", 4000.0, 4000.0),  # 2000 of 4000 µs: exactly half, not above
        _row("op", "small", "fused", "call", 4.0, 0.0, 1e4),
        _row("model", "m", "fused", "call", 100.0, 10.0, math.nan),
    ]
    return to_frame(add_ratios(to_frame(rows)))


def test_fault_cost_comes_from_the_two_copies_where_they_fault_enough(run_frame):
    assert fault_cost_us(run_frame) == pytest.approx(0.5)
    assert math.isnan(fault_cost_us(run_frame[run_frame["shape"] != "big"]))


def test_allocating_calls_are_held_against_the_fresh_output_copy(run_frame):
    frame = run_frame.set_index(["workload", "shape", "baseline", "variant"])
    fresh_gbps, preallocated_gbps = 8e6 / 1500.0 / 1e3, 8e6 / 500.0 / 1e3
    call, out = frame.loc[("op", "big", "fused", "call")], frame.loc[("op", "big", "fused", "out")]
    assert call.copy_limit == "fresh_output" and call.copy_gbps == pytest.approx(fresh_gbps)
    assert call.copy_share == pytest.approx(1500.0 / 1600.0)
    assert out.copy_limit == "into_preallocated" and out.copy_gbps == pytest.approx(preallocated_gbps)
    assert out.copy_share == pytest.approx(500.0 / 600.0)
    model = frame.loc[("model", "m", "fused", "call")]
    assert pd.isna(model.copy_limit) or model.copy_limit == ""
    assert math.isnan(model.copy_gbps) and math.isnan(model.copy_share)


def test_page_fault_share_and_the_flag(run_frame):
    frame = run_frame.set_index(["workload", "shape", "baseline", "variant"])
    assert frame.loc[("op", "big", "fused", "call")].page_fault_share == pytest.approx(1000.0 / 1600.0)
    assert frame.loc[("op", "big", "unfused", "call")].page_fault_share == pytest.approx(PAGE_FAULT_BOUND)
    assert frame.loc[("op", "big", "fused", "out")].page_fault_share == 0.0
    bound = run_frame[page_fault_bound(run_frame)]
    assert {(r.baseline, r.variant, r.shape) for r in bound.itertuples()} == {
        ("copy", "fresh_output", "big"),
        ("fused", "call", "big"),
    }
    line = page_fault_line(run_frame)
    assert "2 row(s) page-fault bound" in line and "fused/call big" in line and "0.50 µs per fault" in line
    console = Console(file=io.StringIO(), width=250, record=True)
    console.print(summary_table(run_frame))
    text = console.export_text()
    assert "faults/call" in text and text.count("PF 62%") == 1 and "PF 94%" not in text
    assert (
        page_fault_line(run_frame[run_frame.variant != "call"].pipe(lambda f: f[f.variant != "fresh_output"])) is None
    )


def test_cuda_rows_get_no_page_fault_share():
    # Host page faults x the CPU's cost per fault says nothing about a time measured by CUDA events.
    rows = [
        _row("limit", "big", "copy", "into_preallocated", 500.0, 0.0),
        _row("limit", "big", "copy", "fresh_output", 1500.0, 2000.0),
        {**_row("op", "big", "fused", "call", 40.0, 30.0), "device": "NVIDIA H100"},
        _row("op", "big", "fused", "call", 1600.0, 2000.0),
    ]
    frame = to_frame(add_ratios(to_frame(rows))).set_index(["device", "baseline", "variant"])
    assert math.isnan(frame.loc[("NVIDIA H100", "fused", "call")].page_fault_share)
    assert frame.loc[("cpu", "fused", "call")].page_fault_share == pytest.approx(1000.0 / 1600.0)
