"""bench/serve: the serving benchmark writes correct rows, counts mismatches, and stops promptly on a signal."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from bench.report.schema import COLUMN_NAMES, SERVE_COLUMNS, read_report, read_samples
from bench.serve.configs import ServeConfig, plan, sweep
from bench.serve.load import drive
from bench.serve.models import ServedModel, make_bank
from bench.serve.run import ServeOptions, run_serve_bench
from bench.serve.summary import best_row, knees, pooled_vs_plain, print_serve_summary, serve_rows
from env.paths import REPO_ROOT
from tests.helpers.serve_models import SMALL, SMALL_FOLDED, small_model_files

QUICK_CONFIGS = (
    ServeConfig("torch", "inference_mode", 1, 1, 2),
    ServeConfig("ort", "run", 1, 1, 2, "custom"),
    ServeConfig("ort", "pooled", 1, 1, 2, "standard"),
    ServeConfig("ort", "pooled", 2, 1, 3, "opset23"),
    ServeConfig("ort", "pooled", 1, 2, 4, "custom"),
)


@pytest.mark.slow  # a real quick serve run, 15-25 s on 2 cores; CI's bench.serve --quick step runs it too
def test_quick_serve_run_writes_one_checked_row_per_configuration(tmp_path_factory, tmp_path):
    files = small_model_files(tmp_path_factory)
    outcome = _small_run(files, SMALL, QUICK_CONFIGS, tmp_path, duration_s=0.15)
    frame = read_report(outcome.paths.csv)
    assert list(frame.columns) == list(COLUMN_NAMES)
    assert sorted(frame.variant) == sorted(c.variant for c in QUICK_CONFIGS)
    assert (frame.workload == "serve").all() and (frame["shape"] == "1x8x32").all()
    assert (frame.mismatches == 0).all() and (frame.errors == 0).all()
    assert (frame.requests > 0).all() and (frame.requests == frame.n).all()
    # Throughput is answered requests over the window: never more than clients / fastest latency allows.
    assert (frame.requests_per_s <= frame.clients * 1e6 / frame.min_us * 1.01).all()
    assert (frame.median_us <= frame.p90_us).all() and (frame.p99_us <= frame.max_us).all()
    samples = read_samples(outcome.paths.csv)
    for row in frame.itertuples():
        assert row.layout == "natural"  # a served model's inputs are placed nowhere
        values = samples[("serve", row.shape, row.dtype, row.baseline, row.variant, row.device, row.layout)].values
        assert len(values) == row.requests and values.max() == pytest.approx(row.max_us)
    ort_rows = frame[frame.baseline == "ort"]
    assert set(ort_rows.allow_spinning) <= {"0", "1"} and (ort_rows.inter_op_threads == 1).all()
    assert outcome.paths.plot.stat().st_size > 0
    assert frame[list(SERVE_COLUMNS)].notna().all().all()
    printed = io.StringIO()
    print_serve_summary(outcome, Console(file=printed, width=250))
    text = printed.getvalue()
    best = frame.loc[frame.requests_per_s.idxmax()]
    assert f"best: {best.baseline}/{best.variant}: {best.requests_per_s:.0f} req/s" in text
    assert "mismatches 0 in every configuration" in text and "MISSED  mismatches" not in text


@pytest.mark.slow  # exports the folded model by every route and serves it, about 20 s on 2 cores
def test_the_folded_model_is_served_by_every_engine_with_checked_responses(tmp_path_factory, tmp_path):
    files = small_model_files(tmp_path_factory, SMALL_FOLDED)
    assert {p.name for p in files.values()} == {f"served-fused_add-{route}.onnx" for route in files}
    configs = (
        ServeConfig("torch", "inference_mode", 1, 1, 2),
        ServeConfig("ort", "pooled", 1, 1, 2, "standard"),
        ServeConfig("ort", "run", 1, 1, 2, "opset23"),
        ServeConfig("ort", "pooled", 1, 1, 2, "custom"),
    )
    outcome = _small_run(files, SMALL_FOLDED, configs, tmp_path, duration_s=0.1)
    frame = read_report(outcome.paths.csv)
    # Every response was checked against the float64 unfused model: a folded graph that dropped a residual
    # add would answer every request wrong.
    assert (frame.mismatches == 0).all() and (frame.requests > 0).all()
    assert sorted(zip(frame.baseline, frame.variant, strict=True)) == sorted(c.row_names("fused_add") for c in configs)


def test_folded_rows_are_named_apart_from_the_plain_models():
    torch_config, ort_config = ServeConfig("torch", "eager", 1, 2, 4), ServeConfig("ort", "run", 1, 2, 4, "custom")
    assert torch_config.row_names() == ("fused", "eager-s1t2c4")
    assert torch_config.row_names("fused_add") == ("fused_add", "eager-s1t2c4")  # as the bench's model rows
    assert ort_config.row_names("fused_add") == ("ort", "custom-run-s1t2c4-fused_add")
    assert SMALL_FOLDED.file_prefix == "served-fused_add" and SMALL.file_prefix == "served"
    with pytest.raises(ValueError, match="impl must be one of fused, fused_add, got 'native'"):
        ServedModel(impl="native")


def test_the_load_driver_counts_wrong_answers_and_errors():
    bank = make_bank(SMALL, size=8)
    calls = {"n": 0}
    lock = threading.Lock()

    def sometimes_wrong(x: np.ndarray) -> np.ndarray:
        with lock:
            calls["n"] += 1
            n = calls["n"]
        index = next(i for i, b in enumerate(bank.inputs) if b is x)
        if n % 10 == 0:
            raise RuntimeError("overloaded")
        if n % 7 == 0:
            return bank.references[(index + 1) % len(bank)]  # another request's answer
        return bank.references[index].astype(np.float32)

    result = drive(sometimes_wrong, bank, clients=3, requests=300, warmup=0)
    assert result.errors == 30
    assert result.mismatches == sum(1 for n in range(1, 301) if n % 7 == 0 and n % 10 != 0)
    assert result.requests == 270


def test_plan_starts_at_half_the_physical_cores_and_reaches_oversubscription():
    for cores in (2, 8, 6):
        points = sweep(cores)
        busy = {c.sessions * c.threads for c in points}
        assert min(busy) == max(1, cores // 2) or min(busy) == 1 << (max(1, cores // 2) - 1).bit_length()
        assert max(busy) > cores
        assert all(c.clients >= c.sessions for c in points)
    variants = [c.variant for c in plan(2)]
    assert len(variants) == len(set(variants))


def synthetic_serve_frame() -> pd.DataFrame:
    rows = []
    for variant, s, t, c, rps, p50, p99 in [
        ("custom-run-s1t1c2", 1, 1, 2, 1000.0, 500.0, 900.0),
        ("custom-pooled-s1t1c2", 1, 1, 2, 1300.0, 400.0, 800.0),
        ("custom-pooled-s2t1c2", 2, 1, 2, 1500.0, 400.0, 1000.0),
        ("custom-pooled-s2t2c2", 2, 2, 2, 1200.0, 500.0, 3000.0),
        ("custom-pooled-s4t1c4", 4, 1, 4, 900.0, 800.0, 5000.0),
        ("custom-pooled-s1t2c4", 1, 2, 4, 1400.0, 600.0, 1500.0),
    ]:
        rows.append(
            dict(
                workload="serve",
                baseline="ort",
                variant=variant,
                sessions=s,
                intra_op_threads=t,
                clients=c,
                other_cpu_share=0.1,
                requests_per_s=rps,
                median_us=p50,
                p99_us=p99,
                mismatches=0,
                errors=0,
                physical_cores=2,
            )
        )
    return pd.DataFrame(rows)


def test_summary_marks_the_best_and_measures_the_knee():
    rows = serve_rows(synthetic_serve_frame())
    assert best_row(rows).variant == "custom-pooled-s2t1c2"
    found = {k.clients: k for k in knees(rows)}
    assert found[2].within_config == "custom-pooled-s2t1c2" and found[2].first_over == "custom-pooled-s2t2c2"
    assert found[2].change == pytest.approx(1200 / 1500 - 1)
    assert found[4].change == pytest.approx(900 / 1400 - 1)
    assert pooled_vs_plain(rows) == {"custom": pytest.approx(1.3)}


_SIGNAL_SCRIPT = """
import sys
from pathlib import Path
from bench.serve.configs import ServeConfig
from bench.serve.run import ServeOptions, main
from tests.helpers.serve_models import SMALL
configs = (ServeConfig("ort", "pooled", 1, 1, 2, "custom"), ServeConfig("ort", "run", 1, 1, 2, "custom"))
options = ServeOptions(duration_s=60, out_dir=Path(sys.argv[1]), models_dir=Path(sys.argv[2]), model=SMALL,
                       configs=configs, warmup=2, bank_size=8)
sys.exit(main(options))
"""


# A real sweep in a fresh interpreter, on the small exported models (their export is this module's fixture, about
# 14 s): the slow tier. test_a_signal_is_not_an_exception_that_a_broad_handler_swallows is the fast test of it.
@pytest.mark.slow
@pytest.mark.timed  # a deadline: the run must stop within 2 s of the signal
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_the_sweep_stops_it_promptly_and_writes_nothing(tmp_path_factory, tmp_path, signum):
    files = small_model_files(tmp_path_factory)
    out = tmp_path / "reports"
    process = subprocess.Popen(
        [sys.executable, "-c", _SIGNAL_SCRIPT, str(out), str(files["custom"].parent)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    lines = []
    try:
        for line in process.stdout:
            lines.append(line)
            if "[1/2]" in line:
                break
        else:
            pytest.fail("the run ended before its sweep started:\n" + "".join(lines))
        time.sleep(1.0)  # well inside the 60 s window of the first configuration
        sent = time.perf_counter()
        process.send_signal(signum)
        process.wait(timeout=10)
        stopped_after = time.perf_counter() - sent
    finally:
        process.kill()
    rest = process.stdout.read()
    assert process.returncode == 128 + signum, "".join(lines) + rest
    assert stopped_after < 2.0
    assert "no report written" in rest
    assert not out.exists() or list(out.iterdir()) == []


def test_the_request_dropped_at_the_deadline_is_not_in_the_window():
    # A request that ends after the deadline is not counted, so its time must not be in the window either:
    # the window then ends at the last counted answer, never after the deadline.
    bank = make_bank(SMALL, size=8)

    def slow(x: np.ndarray) -> np.ndarray:
        time.sleep(0.05)
        return bank.references[next(i for i, b in enumerate(bank.inputs) if b is x)]

    result = drive(slow, bank, clients=1, duration_s=0.22, warmup=0)
    assert result.requests >= 1 and result.wall_s <= 0.22
    assert result.requests_per_s == pytest.approx(result.requests / result.wall_s)


def test_a_signal_is_not_an_exception_that_a_broad_handler_swallows():
    from bench.serve.run import Interrupted

    try:
        try:
            raise Interrupted(signal.SIGTERM)
        except Exception:  # what the pool's session creation catches
            pytest.fail("SIGTERM was swallowed by `except Exception`")
    except Interrupted as stopped:
        assert stopped.code == 128 + signal.SIGTERM


def _small_run(files, model, configs, out_dir, duration_s: float):
    """A short serve run of ``model`` from its exported ``files``, 3 warm-up requests, a bank of 16; no failure."""
    options = ServeOptions(
        duration_s=duration_s,
        out_dir=out_dir,
        models_dir=files["custom"].parent,
        model=model,
        configs=configs,
        warmup=3,
        bank_size=16,
    )
    outcome = run_serve_bench(options, Console(file=open(os.devnull, "w")))
    assert outcome.failures == []
    return outcome
