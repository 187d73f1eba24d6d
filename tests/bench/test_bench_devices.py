"""The device axis: --device selection and its errors, the CUDA plan, skip reasons, CUDA timing (with a
fake event clock where there is no GPU), per-device ratios, targets and plot."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from invoke import Context, Exit

import bench.plan.devices as devices
from bench.measure.timing import TimingConfig, cuda_block_size, measure_cuda
from bench.plan.devices import DeviceUnavailable, device_label, resolve_devices
from bench.plan.grid import GRIDS
from bench.plan.jobs import plan_jobs
from bench.plan.options import BenchOptions
from bench.plan.registry import Unsupported
from bench.plan.workloads import OpCase
from bench.report.metrics import add_ratios
from bench.report.plot import write_plot
from bench.report.schema import COLUMNS, to_frame
from bench.report.targets import GPU_TARGETS, evaluate_targets


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(devices, "cuda_missing_reason", lambda: "no CUDA device is present: test")


@pytest.fixture
def fake_cuda(monkeypatch):
    """Planning as if a GPU were present (nothing is run on it)."""
    monkeypatch.setattr(devices, "cuda_missing_reason", lambda: None)


def test_all_is_every_device_present(no_cuda):
    assert resolve_devices("all") == ["cpu"]
    assert resolve_devices("cpu") == resolve_devices(" cpu, ") == ["cpu"]


def test_all_includes_cuda_where_present(fake_cuda):
    assert resolve_devices("all") == ["cpu", "cuda"]
    assert resolve_devices("cuda,cpu") == ["cpu", "cuda"]


def test_asking_for_a_missing_cuda_device_says_why_and_what_to_do(no_cuda):
    with pytest.raises(DeviceUnavailable, match=r"no CUDA device is present: test - run with --device cpu"):
        resolve_devices("cuda")


@pytest.mark.parametrize("spec", ["gpu", "", "cpu,tpu", "all,cpu"])
def test_unknown_device_names_are_refused(spec):
    with pytest.raises(ValueError, match="--device must be one of"):
        resolve_devices(spec)


def test_the_reason_names_a_cpu_only_torch(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    assert "CPU-only build" in devices.cuda_missing_reason()
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    assert "finds no GPU" in devices.cuda_missing_reason() and "13.0" in devices.cuda_missing_reason()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert devices.cuda_missing_reason() is None
    assert device_label("cpu") == "cpu"


def test_bench_task_without_cuda_exits_with_the_reason(no_cuda):
    import tasks

    with pytest.raises(Exit) as raised:
        tasks.bench(Context(), device="cuda")
    assert raised.value.code != 0 and "no CUDA device is present" in str(raised.value.message)
    assert "Traceback" not in str(raised.value.message)


def test_plan_runs_each_baseline_on_its_devices_with_each_devices_grid(fake_cuda, tmp_path):
    labels = [job.label for job in plan_jobs(BenchOptions(baseline="all", quick=True), tmp_path)]
    cpu = [label for label in labels if not label.startswith("cuda ")]
    cuda = [label for label in labels if label.startswith("cuda ")]
    assert cpu[0] == "limit dispatch floor" and cuda[0] == "cuda limit launch floor"
    assert labels == cpu + cuda  # device by device
    assert not any("liger" in label for label in cpu) and "cuda op 4096x8192 bfloat16 liger" in cuda
    for dtype in GRIDS["cuda"].dtypes.split(","):
        for shape in ("1x8x512", "4096x8192"):
            assert {
                f"cuda op {shape} {dtype} {b}"
                for b in ("copy", "unfused", "fused", "native", "compiled", "liger", "ort")
            } <= set(cuda)
    assert "cuda model small 1x32 bfloat16 fused" in cuda
    assert not list(tmp_path.iterdir())  # planning touched no device


def _cuda_case() -> OpCase:
    x, w, b = torch.ones(2, 8), torch.ones(8), torch.zeros(8)
    return OpCase(shape=(2, 8), dtype=torch.float32, x=x, weight=w, bias=b, workdir=Path("."), device="cuda")


def test_liger_is_skipped_with_the_import_error_where_it_is_not_importable():
    pytest.importorskip("bench.plan.baselines.liger")
    from bench.plan.baselines.liger import Liger, _rms_norm

    function, why = _rms_norm()
    if function is not None:
        pytest.skip("liger-kernel is importable here: its rows are measured on a GPU")
    with pytest.raises(Unsupported, match="liger-kernel is not importable here"):
        Liger().variants(_cuda_case())


def test_ort_on_cuda_is_skipped_with_ort_s_own_reason_where_it_has_no_cuda_provider():
    from bench.plan.baselines.ort import Ort, _cuda_provider

    usable, _ = _cuda_provider()
    if usable:
        pytest.skip("onnxruntime has a working CUDA provider here: its rows are measured")
    with pytest.raises(Unsupported, match="no working CUDA provider in onnxruntime: "):
        Ort().variants(_cuda_case())


class _FakeDevice:
    """A device clock for the CUDA timer without a GPU: every call advances it by ``call_us``."""

    def __init__(self, call_us: float) -> None:
        self.now_us, self.call_us, self.calls, self.flushes, self.syncs = 0.0, call_us, 0, 0, 0

    def call(self) -> None:
        self.calls += 1
        self.now_us += self.call_us

    def flush(self) -> None:
        self.flushes += 1
        self.now_us += 1000.0  # a flush takes device time too, but outside the events

    def event(self):
        device = self

        class Event:
            def record(self) -> None:
                self.at_us = device.now_us

            def elapsed_time(self, end) -> float:
                return (end.at_us - self.at_us) / 1e3  # milliseconds, as torch.cuda.Event

        return Event()

    def synchronize(self) -> None:
        self.syncs += 1


def test_cuda_block_covers_the_event_resolution():
    device = _FakeDevice(call_us=2.0)
    assert cuda_block_size(device.call, device) == 25  # 50 us / 2 us per call
    slow = _FakeDevice(call_us=100.0)
    assert cuda_block_size(slow.call, slow) == 1


def test_cuda_timing_warms_up_then_samples_per_call_device_time():
    device = _FakeDevice(call_us=4.0)
    timing = measure_cuda(device.call, TimingConfig(warmup=7, budget_s=0.001, min_samples=40), clock=device)
    assert timing.block == 13 and timing.warmup == 7  # ceil(50 / 4)
    assert len(timing.samples_us) >= 40 and np.allclose(timing.samples_us, 4.0)
    assert device.flushes == 0 and device.syncs >= 2  # not after every sample


def test_cuda_timing_with_l2_flush_times_single_calls_and_never_the_flush():
    device = _FakeDevice(call_us=3.0)
    config = TimingConfig(warmup=0, budget_s=0.001, min_samples=20)
    timing = measure_cuda(device.call, config, flush=device.flush, clock=device)
    assert timing.block == 1 and device.flushes == len(timing.samples_us) >= 20
    assert np.allclose(timing.samples_us, 3.0)


def test_cuda_timing_of_a_graph_divides_by_the_calls_it_replays():
    device = _FakeDevice(call_us=60.0)  # one replay of 20 captured calls of 3 us
    timing = measure_cuda(
        device.call, TimingConfig(warmup=1, budget_s=0.001, min_samples=5), calls_per_call=20, clock=device
    )
    assert np.allclose(timing.samples_us, 3.0)
    # Calls (for faults per call) count the captured calls, not the replays.
    assert timing.calls == 20 * len(timing.samples_us) * timing.block


def test_cuda_timing_respects_the_time_budget():
    device = _FakeDevice(call_us=100.0)

    def call():  # at least 1 ms of host time per call: 50 ms of budget holds at most 50 calls
        time.sleep(1e-3)
        device.call()

    timing = measure_cuda(call, TimingConfig(warmup=0, budget_s=0.05, min_samples=1), clock=device)
    # Samples come 16 per synchronisation: the budget is checked between those batches.
    assert 16 <= len(timing.samples_us) <= 64 and len(timing.samples_us) % 16 == 0


def _rows(device: str, rows: list[tuple[str, str, str, str, str, float, float]]) -> list[dict]:
    defaults = {
        name: ("x" if dtype == "string" else (1 if dtype == "int64" else math.nan)) for name, dtype, _ in COLUMNS
    }
    out = []
    for workload, shape, dtype, baseline, variant, median, bytes_moved in rows:
        out.append(
            {
                **defaults,
                "workload": workload,
                "shape": shape,
                "dtype": dtype,
                "baseline": baseline,
                "variant": variant,
                "device": device,
                "layout": "natural",
                "median_us": median,
                "bytes_moved": bytes_moved,
                "gbps": bytes_moved / median / 1e3,
                "iqr_us": 0.1,
                "threads": 1,
                "timestamp_utc": "t",
                "cpu_model": "c",
            }
        )
    return out


GPU = "NVIDIA Test GPU"
BIG = 2.0 * 4096 * 8192 * 2


def _two_device_frame() -> pd.DataFrame:
    cpu = _rows(
        "cpu",
        [
            ("limit", "1", "float32", "dispatch", "torch_noop", 2.0, math.nan),
            ("limit", "1x8x512", "float32", "copy", "into_preallocated", 1.0, 16384.0),
            ("op", "1x8x512", "float32", "unfused", "call", 50.0, 16384.0),
            ("op", "1x8x512", "float32", "fused", "call", 5.0, 16384.0),
        ],
    )
    gpu = _rows(
        GPU,
        [
            ("limit", "1", "float32", "launch", "empty_kernel", 4.0, math.nan),
            ("limit", "1", "float32", "launch", "empty_kernel_graph", 2.0, math.nan),
            ("limit", "4096x8192", "bfloat16", "copy", "into_preallocated", 40.0, BIG),
            ("op", "4096x8192", "bfloat16", "fused", "call", 45.0, BIG),
            ("op", "4096x8192", "bfloat16", "native", "call", 60.0, BIG),
            ("op", "4096x8192", "bfloat16", "liger", "call", 44.0, BIG),
            ("op", "1x8x512", "float32", "unfused", "call", 30.0, 16384.0),
            ("op", "1x8x512", "float32", "fused", "call", 6.0, 16384.0),
            ("op", "1x8x512", "float32", "fused", "graph", 2.4, 16384.0),
        ],
    )
    return to_frame(add_ratios(to_frame(cpu + gpu)))


def test_ratios_stay_within_each_device():
    frame = _two_device_frame().set_index(["device", "shape", "baseline", "variant"])
    assert frame.loc[("cpu", "1x8x512", "fused", "call"), "speedup_vs_unfused"] == 10.0
    assert frame.loc[(GPU, "1x8x512", "fused", "call"), "speedup_vs_unfused"] == 5.0
    assert frame.loc[("cpu", "1x8x512", "fused", "call"), "vs_launch_floor"] == 2.5  # over the CPU dispatch floor
    assert frame.loc[(GPU, "1x8x512", "fused", "call"), "vs_launch_floor"] == 1.5  # over an empty kernel launch
    assert frame.loc[(GPU, "1x8x512", "fused", "graph"), "vs_launch_floor"] == pytest.approx(1.2)  # graph over graph
    assert frame.loc[(GPU, "4096x8192", "fused", "call"), "copy_share"] == pytest.approx(40 / 45)
    assert math.isnan(frame.loc[(GPU, "1x8x512", "fused", "call"), "copy_share"])  # no GPU copy row at that shape


def test_gpu_targets_are_judged_per_gpu_and_cpu_targets_on_cpu_rows_only():
    results = {r.name: r for r in evaluate_targets(_two_device_frame())}
    share, graph, call, peers = (results[f"{GPU}: {t.name}"] for t in GPU_TARGETS)
    assert share.met is True and "89% of copy" in share.detail  # 40/45, and the 16384x8192 row is absent
    assert graph.met is True and "1.20x" in graph.detail
    assert call.met is False and "1.50x" in call.detail
    assert peers.met is False and "native/fused 1.33" in peers.detail and "liger/fused 0.98" in peers.detail
    assert results["fused vs unfused at 1x8x512: >= 5x"].detail == "1x8x512 10.0x"  # the GPU's 5.0x is not mixed in
    assert not any(name.startswith(f"{GPU}: ") for name in results if name.startswith("fused vs unfused"))


def test_a_gpu_only_report_judges_only_gpu_targets():
    frame = _two_device_frame()
    names = [r.name for r in evaluate_targets(frame[frame.device == GPU])]
    assert names and all(name.startswith(f"{GPU}: ") for name in names)


def test_the_plot_has_a_row_of_panels_per_device(tmp_path):
    import matplotlib.image

    path = write_plot(_two_device_frame(), tmp_path / "two.png")
    one = write_plot(_two_device_frame().query("device == 'cpu'"), tmp_path / "one.png")
    height_two, height_one = matplotlib.image.imread(path).shape[0], matplotlib.image.imread(one).shape[0]
    assert height_two == 2 * height_one


@pytest.mark.gpu
def test_cuda_rows_on_a_tiny_grid(tmp_path):
    from tests.helpers.devices import cuda_skip_reason

    if (reason := cuda_skip_reason()) is not None:
        pytest.skip(reason)
    import io

    from rich.console import Console

    from bench.run import run_bench

    options = BenchOptions(
        baseline="unfused,fused,native",
        device="cuda",
        warmup=3,
        budget_s=0.02,
        out_dir=tmp_path,
        op_shapes=((4, 256), (64, 4096)),
        model_batches=(),
        dtype="float32,bfloat16",
    )
    outcome = run_bench(options, Console(file=io.StringIO()))
    assert outcome.failures == [], outcome.failures
    frame = outcome.frame
    assert (frame.device == torch.cuda.get_device_name()).all() and set(frame.timer) == {"cuda_events"}
    assert {"empty_kernel", "empty_kernel_graph", "graph"} <= set(frame.variant)
    assert frame.vs_launch_floor.notna().all()
    # On a GPU every row is held against the copy into a preallocated buffer (the caching allocator maps no
    # fresh pages): that copy's share is 1, the fresh-output copy's is its own bandwidth over that copy's.
    copies = frame[frame.baseline == "copy"].set_index(["shape", "dtype", "variant"])
    assert (copies.copy_limit == "into_preallocated").all()
    for (shape, dtype, variant), row in copies.iterrows():
        expected = row.gbps / copies.loc[(shape, dtype, "into_preallocated"), "gbps"]
        assert row.copy_share == pytest.approx(expected, rel=1e-12), (shape, dtype, variant)


def test_a_named_baseline_that_runs_on_no_measured_device_is_listed_as_skipped(no_cuda, tmp_path):
    import io

    from rich.console import Console

    from bench.run import run_bench

    options = BenchOptions(
        baseline="liger,fused",
        device="cpu",
        warmup=1,
        budget_s=0.01,
        threads=1,
        out_dir=tmp_path,
        op_shapes=((1, 4, 64),),
        model_batches=(),
    )
    outcome = run_bench(options, Console(file=io.StringIO()))
    assert outcome.skipped == ["liger: runs on cuda only"] and outcome.failures == []
    assert "liger" not in set(outcome.frame.baseline) and "fused" in set(outcome.frame.baseline)
