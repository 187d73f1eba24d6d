"""The terminal summary: one screen, its headline numbers those of the report, the full table in a file."""

from __future__ import annotations

import io
import math
import re

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from bench.report.metrics import add_ratios
from bench.report.schema import (
    COLUMNS,
    SCHEMA_VERSION,
    RowSamples,
    read_report,
    read_samples,
    row_key,
    to_frame,
    write_report,
)
from bench.report.summary import SCREEN_LINES, print_summary, summary_path
from bench.rounds import Outcome

SHAPES = ("1x8x512", "4x64x768", "8x128x1024", "16x256x2048", "32x512x4096")  # the CPU grid's op shapes


def _row(workload, shape, baseline, variant, median_us, threads, other_cpu_share, bytes_moved, width, layout):
    row = {name: {"string": "x", "int64": 1, "Int64": None, "float64": math.nan}[dtype] for name, dtype, _ in COLUMNS}
    row.update(
        schema_version=SCHEMA_VERSION,
        workload=workload,
        shape=shape,
        dtype="float32",
        device="cpu",
        layout=layout,
        threads=threads,
        baseline=baseline,
        variant=variant,
        median_us=median_us,
        minor_faults_per_call=0.0,
        other_cpu_share=other_cpu_share,
        bytes_moved=bytes_moved,
        gbps=bytes_moved / median_us / 1e3,
        malloc_policy="default",
        median_lo_us=median_us * (1 - width),
        median_hi_us=median_us * (1 + width),
        precision_target=0.02,
    )
    return row


@pytest.fixture
def report(tmp_path):
    """Full-grid reports at 1 and 2 threads (as bench.targets joins them), each op case and its copies at both
    layouts, medians drawn at random; a third of the rows timed while other processes were busy."""
    rng = np.random.default_rng()
    frames = []
    for threads in (1, 2):
        rows = []
        for shape, layout in ((s, layout) for s in SHAPES for layout in ("natural", "page_offset")):
            elements = math.prod(int(d) for d in shape.split("x"))
            nbytes = 8.0 * elements
            copy = nbytes / 10e3 * rng.lognormal(0, 0.1)  # about 10 GB/s
            fused = copy / rng.uniform(0.5, 1.0)
            variants = {
                ("limit", "copy", "into_preallocated"): copy,
                ("limit", "copy", "fresh_output"): copy * rng.uniform(1.0, 1.5),
                ("op", "fused", "out"): fused,
                ("op", "fused", "call"): fused * rng.uniform(1.0, 1.3),
                ("op", "unfused", "call"): fused * rng.uniform(2.0, 12.0),
                ("op", "native", "call"): fused * rng.uniform(0.8, 3.0),
                ("op", "compiled", "call"): fused * rng.uniform(0.8, 3.0),
                ("op", "ort", "standard-iobinding"): fused * rng.uniform(0.9, 2.0),
                ("op", "ort", "custom-iobinding"): fused * rng.uniform(0.95, 1.2),
            }
            for (workload, baseline, variant), median in variants.items():
                busy = float(rng.uniform(0.2, 0.6)) if rng.random() < 0.33 else float(rng.uniform(0.0, 0.05))
                width = float(rng.uniform(0.021, 0.2)) if rng.random() < 0.25 else float(rng.uniform(0.002, 0.02))
                rows.append(_row(workload, shape, baseline, variant, median, threads, busy, nbytes, width, layout))
        drawn = []  # each row's samples: 1 to 400 of them, spread about its median, with its block size
        for row in rows:
            values = row["median_us"] * rng.lognormal(0.0, 0.05, size=int(rng.integers(1, 400)))
            row.update(n=len(values), block=int(rng.choice([1, 4, 100])), mean_us=float(values.mean()))
            drawn.append(values)
        frame = to_frame(add_ratios(to_frame(rows)))
        samples = {row_key(r): RowSamples.single_round(v) for r, v in zip(frame.to_dict("records"), drawn, strict=True)}
        paths = write_report(tmp_path / f"20260101T00000{threads}Z-host.csv", frame, samples)
        frames.append(read_report(paths.csv))
    failures = [f"op 1x8x512 float32 liger/call {i}: ImportError" for i in range(7)]
    return Outcome(paths, pd.concat(frames, ignore_index=True), failures, ["ort bfloat16: not supported"] * 3, 123.0)


def _printed(outcome, verbose=False, width=100) -> str:
    console = Console(file=io.StringIO(), width=width, record=True, force_terminal=False)
    print_summary(outcome, console, verbose=verbose)
    return console.export_text()


def test_the_summary_fits_one_screen_and_its_headline_numbers_are_the_reports(report):
    text = _printed(report)
    lines = text.rstrip("\n").split("\n")
    assert len(lines) <= SCREEN_LINES, text
    for threads in (1, 2):  # recomputed here from the reports' medians, not with the summary's code
        frame = read_report(report.paths.csv.with_name(f"20260101T00000{threads}Z-host.csv"))
        rows = frame[(frame.workload == "op") & (frame.layout == "natural")]  # the headline's layout
        median = {(r.baseline, r.variant, r.shape): r.median_us for r in rows.itertuples()}
        start = next(i for i, line in enumerate(lines) if line.startswith(f"cpu, {threads} thread(s), float32"))
        block = "\n".join(lines[start : start + 6])
        for name, baseline, variant, fused in (
            ("unfused", "unfused", "call", "call"),
            ("F.rms_norm", "native", "call", "call"),
            ("torch.compile", "compiled", "call", "call"),
            ("ORT fused node", "ort", "standard-iobinding", "out"),
        ):
            ratios = {s: median[(baseline, variant, s)] / median[("fused", fused, s)] for s in SHAPES}
            low, high = min(ratios, key=ratios.get), max(ratios, key=ratios.get)
            geomean = math.exp(sum(math.log(v) for v in ratios.values()) / len(ratios))
            line = re.search(rf"^  {re.escape(name)} .*$", block, re.M).group(0)
            assert f"{geomean:.2f}x" in line and f"{ratios[low]:.2f}x ({low})" in line, line
            assert f"{ratios[high]:.2f}x ({high})" in line, line
        share = {
            s: 100
            * rows[(rows.baseline == "fused") & (rows.variant == "out") & (rows["shape"] == s)].copy_share.iloc[0]
            for s in SHAPES
        }
        low, high = min(share, key=share.get), max(share, key=share.get)
        assert f"{share[low]:.0f}% ({low}) to {share[high]:.0f}% ({high})" in block
    frame = report.frame
    wide = (frame.median_hi_us - frame.median_lo_us) / 2 / frame.median_us > frame.precision_target
    untrusted = int((wide | (frame.other_cpu_share > 0.10)).sum())
    assert f"{untrusted} row(s) not to trust" in text
    assert "targets:" in text and "7 failure(s)" in text and "3 skipped" in text
    assert str(report.paths.csv) in text and str(summary_path(report.paths.csv)) in text


def test_the_last_line_gives_the_seconds_the_samples_took(report):
    """Recomputed from the samples files: every sample is ``block`` calls, each of the sample's microseconds."""
    seconds = 0.0
    for threads in (1, 2):
        csv = report.paths.csv.with_name(f"20260101T00000{threads}Z-host.csv")
        blocks = {row_key(r): r["block"] for r in read_report(csv).to_dict("records")}
        seconds += sum(s.values.sum() * blocks[key] for key, s in read_samples(csv).items()) / 1e6
    assert seconds > 1.0  # the fixture's rows are long enough to say something
    last = _printed(report).rstrip("\n").split("\n")[-1]
    assert last == f"123 s (the timed samples {seconds:.0f} s of it); 7 failure(s)", last


def test_the_full_table_goes_to_the_summary_file_and_verbose_prints_it(report):
    short = _printed(report, width=250)
    full = summary_path(report.paths.csv).read_text()
    assert summary_path(report.paths.csv).name == "20260101T000002Z-host.summary.txt"
    for row in report.frame.itertuples():  # every row is in the file's table
        pattern = rf"{re.escape(row.shape)} +│ float32 │ {re.escape(row.baseline)} +│ {row.variant} +│ {row.layout} "
        assert re.search(pattern, full)
    assert "median µs" in full and "median µs" not in short
    # The copy shares judged again at the page offset, named by it (not swallowed as console markup).
    assert re.search(r"(met|MISSED|inconclusive) +layout page_offset: fused out variant: ", full)
    verbose = _printed(report, verbose=True, width=250)
    assert "median µs" in verbose and len(verbose.splitlines()) > 2 * SCREEN_LINES


def test_a_run_that_measured_nothing_says_so_in_a_few_lines():
    text = _printed(Outcome(None, None, ["nothing was measured"], [], 2.0))
    assert text.splitlines() == ["FAILED nothing was measured", "2 s; 1 failure(s)"]


def test_no_screen_line_wraps_in_a_narrow_terminal(report):
    # ... but a path: cut, it could not be opened
    lines = _printed(report, width=60).rstrip("\n").split("\n")
    paths = {f"  {report.paths.csv}", f"  {summary_path(report.paths.csv)}"}
    assert len(lines) <= SCREEN_LINES and all(len(line) <= 60 for line in lines if line not in paths)
    assert paths <= set(lines)
