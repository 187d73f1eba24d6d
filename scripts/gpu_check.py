#!/usr/bin/env python3
"""The ONE device call of the CUDA path: build, check and benchmark fused_norm on a GPU.

In a single run on the GPU machine this script
  1. builds the torch extension WITH its CUDA kernels against that machine's
     own torch (env.build.steps.build: toolchain record, JIT build, ORT library,
     CUDA compile check with the ptxas report of that machine's nvcc);
  2. runs tests/ops/test_cuda_op.py there: values against float64 for every dtype
     and every kernel variant with NaN-poisoned outputs, variant coverage via
     the profiler, opcheck on CUDA, strides, streams, device errors, and ORT's
     CUDA route against torch (skipped with the reason when ORT has no CUDA);
  3. benchmarks unfused, native (F.rms_norm + bias), compiled
     (torch.compile of unfused), fused (and fused_out), ORT (CUDA provider, if
     usable) with CUDA events, eager and CUDA-graph replay, next to a
     device-to-device copy of the same bytes (the bandwidth ceiling) and an
     empty-kernel launch (the latency floor), measured in the same run;
  4. writes gpu_bench.csv (card named in every row), summary.json,
     gpu_tests.xml, toolchain.json, cuda_resource_report.json and ptxas.log
     under --out ($OUT on the device machine), and prints a short table last.

How it gets onto the GPU machine (see ../.library/device/ README, KINDS.md)
-------------------------------------------------------------------------
The device tool copies the working tree (tracked and untracked-not-ignored
files; not build/ or .venv/) to a bare machine with no network. That image
has python3 3.12 with a CUDA torch (2.11.0+cu130 when last read), triton,
numpy, onnx, onnxscript, pytest, pyyaml, ninja and nvcc 13.0; its onnxruntime
is the CPU-only package (1.30), and onnxruntime-gpu (a 255 MB wheel) is too big
to carry (64 MiB per call). So: no virtual environment travels; the
extension is built there against the image's torch (which is the point: a
build must match the torch that loads it). The one input the build needs
from this machine is the ONNX Runtime headers (the image has no npm and no
network): ``--prepare-carry`` copies the verified header cache into
build/device-carry/, which the call carries.

  # here, once per session (after `invoke build` fetched the headers):
  python scripts/gpu_check.py --prepare-carry
  # the device call (one command, ~5-8 minutes including the build):
  run(command="bash scripts/gpu_check.sh --label <git short sha>",
      carry=["build/device-carry"], timeout_s=590)
  # then commit the CSV: reports/gpu_<card>_<date>.csv

Without a GPU (``--dry-run``, also what CI-like machines can do) the same
steps run on the CPU: the build (CPU-only torch: no CUDA kernels registered),
the CUDA compile check, the GPU tests (all skip, saying why), and the
benchmark loop with host timers on two small shapes, writing the same CSV
with every GPU-only row marked unavailable.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # env/ and ops/ from any working directory

CARRY_DIR = REPO_ROOT / "build" / "device-carry"
CARRY_CACHE = CARRY_DIR / "cache"  # a FUSEDBENCH_CACHE holding ort-headers/<source id>/
DEFAULT_BUILD_DIR = Path("/tmp/fusedbench-gpu-check-build")
EPS = 1e-6

# --- what is measured ------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    shape: tuple[int, ...]
    dtype: str

    @property
    def label(self) -> str:
        return "x".join(map(str, self.shape)) + f" {self.dtype}"


# Order = priority: the two headline targets first, so a time limit cuts the rest.
GPU_CASES = [
    Case((1, 8, 512), "bfloat16"),  # latency target: within 1.3x of an empty launch
    Case((4096, 8192), "bfloat16"),  # bandwidth target: >= 85 % of copy, >= native
    Case((1, 8, 512), "float32"),
    Case((4096, 8192), "float32"),
    Case((4096, 8192), "float16"),
    Case((8, 128, 1024), "bfloat16"),
    Case((8, 128, 1024), "float32"),
    Case((4096, 1024), "bfloat16"),  # warp-per-row, 4 vectors per lane
    Case((4096, 4096), "bfloat16"),  # block per row, 128 threads
    Case((512, 65536), "bfloat16"),  # two-pass kernel (row longer than a block's registers)
    Case((4096, 8191), "bfloat16"),  # odd row length: the scalar path
]
DRY_RUN_CASES = [Case((1, 8, 512), "float32"), Case((8, 128, 1024), "bfloat16")]

PROVIDERS = ["launch_floor_kernel", "launch_floor_op", "copy", "unfused", "native", "compiled", "fused",
             "fused_out", "ort"]
NORM_PROVIDERS = ["unfused", "native", "compiled", "fused", "fused_out", "ort"]
# Loose sanity bounds for the pre-timing value check (max |y - ref| / max |ref|):
# the real tolerances live in tests/tests.helpers.op_reference.py; this only catches a
# provider that computes something else.
SANITY = {"float32": 1e-4, "float64": 1e-10, "float16": 4e-3, "bfloat16": 3e-2}


@dataclass
class Row:
    """One CSV row; field order = column order."""

    label: str
    card: str
    device_info: str
    torch: str
    cuda: str
    kernel_sha256: str
    case: str
    shape: str
    dtype: str
    provider: str
    mode: str  # eager | graph | host_sync
    status: str  # ok | unavailable: ... | error: ... | skipped: ...
    median_us: float | None = None
    min_us: float | None = None
    max_us: float | None = None
    reps: int | None = None
    calls_per_rep: int | None = None
    bytes_per_call: int | None = None
    gbps: float | None = None
    frac_of_copy: float | None = None
    vs_native: float | None = None
    vs_launch_floor: float | None = None
    note: str = ""


class Unavailable(Exception):
    """A provider or mode cannot run here; the message says why."""


# --- environment ---------------------------------------------------------------------


def log(message: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {message}", flush=True)


def prepare_environment(args: argparse.Namespace) -> None:
    """Variables the build and the tests read; set before importing env/ops."""
    os.environ["FUSEDBENCH_BUILD_DIR"] = str(args.build_dir)
    if CARRY_CACHE.is_dir() and "FUSEDBENCH_CACHE" not in os.environ:
        os.environ["FUSEDBENCH_CACHE"] = str(CARRY_CACHE)
    cuda_bin = Path("/usr/local/cuda/bin")
    if shutil.which("nvcc") is None and (cuda_bin / "nvcc").is_file():
        os.environ["PATH"] = f"{cuda_bin}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 1))


def prepare_carry() -> int:
    """Copy the verified ORT header cache into build/device-carry (what the device call carries)."""
    from env.build.ort_headers import cache_root, ensure_ort_headers

    headers = ensure_ort_headers()
    source = Path(headers.path)
    if cache_root() not in source.parents:
        print(f"FUSEDBENCH_ORT_HEADERS points at {source}; carry that folder and set it on the device instead")
        return 1
    target = CARRY_CACHE / source.relative_to(cache_root())
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)
    size = sum(p.stat().st_size for p in CARRY_DIR.rglob("*") if p.is_file())
    print(f"copied {headers.summary()}\n  to {target} ({size / 1e6:.1f} MB in {CARRY_DIR})")
    print('device call: run(command="bash scripts/gpu_check.sh --label $(git rev-parse --short HEAD)", '
          'carry=["build/device-carry"], timeout_s=590)  (write the sha literally)')
    return 0


@dataclass
class Device:
    cuda: bool
    card: str
    info: str


def describe_device() -> Device:
    import torch

    if not torch.cuda.is_available():
        return Device(False, f"cpu ({platform.processor() or platform.machine()}; dry run)",
                      f"{os.cpu_count()} logical CPUs; no CUDA device (torch {torch.__version__})")
    props = torch.cuda.get_device_properties(0)
    parts = [f"cc {props.major}.{props.minor}", f"{props.multi_processor_count} SMs",
             f"{props.total_memory / 2**30:.0f} GiB"]
    l2 = getattr(props, "L2_cache_size", None)
    if l2:
        parts.append(f"L2 {l2 / 2**20:.0f} MiB")
    smi = shutil.which("nvidia-smi")
    if smi:
        out = subprocess.run([smi, "--query-gpu=driver_version,clocks.sm,clocks.mem", "--format=csv,noheader"],
                             capture_output=True, text=True, check=False).stdout.strip().splitlines()
        if out:
            parts.append(f"driver/sm/mem clocks {out[0]}")
    return Device(True, torch.cuda.get_device_name(0), "; ".join(parts))


# --- steps 1-2: build and tests ---------------------------------------------------------


def step_build(args: argparse.Namespace) -> tuple[dict | None, list[str]]:
    """env.build.steps.build('jit') against the running torch; returns the toolchain record and problems."""
    from env.build import toolchain
    from env.paths import toolchain_record_path

    problems: list[str] = []
    if args.skip_build:
        log(f"--skip-build: using {toolchain_record_path()}")
        return (toolchain.read_record() if toolchain_record_path().exists() else None), problems
    from env.build.steps import build

    start = time.perf_counter()
    try:
        build("jit")
    except Exception as error:  # keep going: the torch library may exist even if a later step failed
        problems.append(f"build: {type(error).__name__}: {error}")
        log(f"BUILD PROBLEM: {problems[-1]}")
    log(f"build finished in {time.perf_counter() - start:.0f} s")
    record = toolchain.read_record() if toolchain_record_path().exists() else None
    if record is not None and "cuda_resource_report" not in record.get("build", {}):
        # The ORT step failed before the compile check ran: run the check anyway.
        from env.build import cuda as cuda_build

        try:
            cuda_build.run_in_build(record)
            toolchain.write_record(record)
        except Exception as error:
            problems.append(f"CUDA compile check: {type(error).__name__}: {error}")
    return record, problems


def step_tests(args: argparse.Namespace, deadline: float) -> dict:
    """pytest tests/ops/test_cuda_op.py with a JUnit report; returns counts, failures and skip reasons."""
    junit = args.out / "gpu_tests.xml"
    timeout = max(30, int(deadline - time.time() - args.bench_reserve_s))
    cmd = [sys.executable, "-m", "pytest", "tests/ops/test_cuda_op.py", "-q", "-rs", "-p", "no:cacheprovider",
           f"--junitxml={junit}"]
    log(f"tests: {' '.join(cmd[1:])} (timeout {timeout} s)")
    try:
        proc = subprocess.run(cmd, cwd=REPO_ROOT, timeout=timeout, check=False)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        code = "timeout"
    summary: dict = {"exit_code": code, "junit": str(junit)}
    if not junit.exists():
        summary["error"] = "pytest wrote no JUnit report"
        return summary
    root = ET.parse(junit).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    summary.update({k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")})
    summary["passed"] = summary["tests"] - summary["failures"] - summary["errors"] - summary["skipped"]
    failed, skips = [], {}
    for case in suite.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(name)
        skip = case.find("skipped")
        if skip is not None:
            reason = skip.get("message", "")
            skips[reason] = skips.get(reason, 0) + 1
    summary["failed_tests"] = failed
    summary["skip_reasons"] = skips
    return summary


# --- step 3: benchmarks ---------------------------------------------------------------------


class CudaTimer:
    """Per-call seconds of ``calls`` back-to-back calls, from CUDA events on the current stream."""

    def __init__(self):
        import torch

        self.torch = torch

    def run(self, step: Callable[[int], None], calls: int) -> float:
        start, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(calls):
            step(i)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / calls


class HostTimer:
    """perf_counter around ``calls`` calls, synchronising the device (if any) at the end."""

    def __init__(self, cuda: bool):
        import torch

        self.sync = torch.cuda.synchronize if cuda else (lambda: None)

    def run(self, step: Callable[[int], None], calls: int) -> float:
        self.sync()
        start = time.perf_counter()
        for i in range(calls):
            step(i)
        self.sync()
        return (time.perf_counter() - start) / calls


@dataclass
class Measurement:
    per_call_s: list[float]
    calls: int
    note: str = ""

    @property
    def median_us(self) -> float:
        return statistics.median(self.per_call_s) * 1e6


def calibrate(timer, step: Callable[[int], None], target_s: float, max_calls: int) -> int:
    """Calls per repetition so that one repetition lasts about ``target_s``."""
    probe = timer.run(step, 3)
    return int(min(max_calls, max(5, math.ceil(target_s / max(probe, 1e-9)))))


def measure(timer, step: Callable[[int], None], reps: int, target_s: float, max_calls: int) -> Measurement:
    calls = calibrate(timer, step, target_s, max_calls)
    return Measurement([timer.run(step, calls) for _ in range(reps)], calls)


def measure_graph(fns: list[Callable[[], object]], reps: int, target_s: float) -> Measurement:
    """Capture calls of ``fns`` (rotating input sets) in one CUDA graph and time its replays."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside capture, as torch recommends
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    # One eager pass estimates the per-call time, which sizes the graph.
    per_call = CudaTimer().run(lambda i: fns[i % len(fns)](), 2 * len(fns))
    per_graph = max(len(fns), min(200, math.ceil(2e-3 / max(per_call, 1e-9))))
    per_graph = math.ceil(per_graph / len(fns)) * len(fns)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(per_graph):
            fns[i % len(fns)]()
    graph.replay()
    torch.cuda.synchronize()
    replays = calibrate(CudaTimer(), lambda i: graph.replay(), target_s, 10_000)
    timer = CudaTimer()
    samples = [timer.run(lambda i: graph.replay(), replays) / per_graph for _ in range(reps)]
    return Measurement(samples, replays * per_graph, f"{per_graph} calls per graph")


def make_input_sets(case: Case, count: int, device: str, seed: int):
    """``count`` independent (x, weight, bias) sets: activations with per-row scales over
    two decades and a few outliers, weights near 1, small biases (never zeros)."""
    import torch

    dtype = getattr(torch, case.dtype)
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    sets = []
    for _ in range(count):
        scale = torch.exp(torch.empty(*case.shape[:-1], 1, device=device).uniform_(-2.3, 2.3, generator=g))
        x = torch.randn(*case.shape, device=device, generator=g) * scale
        x = torch.where(torch.rand(*case.shape, device=device, generator=g) < 0.002, 20 * x, x)
        w = 1 + 0.1 * torch.randn(case.shape[-1], device=device, generator=g)
        b = 0.05 * torch.randn(case.shape[-1], device=device, generator=g)
        sets.append(tuple(t.to(dtype) for t in (x, w, b)))
    return sets


def input_set_count(case: Case, elem_bytes: int, l2_bytes: int) -> int:
    """Enough input sets that consecutive calls do not find theirs in L2 (x and y both count)."""
    per_set = 2 * math.prod(case.shape) * elem_bytes
    return int(min(8, max(1, math.ceil(3 * l2_bytes / per_set))))


def ort_callable(case: Case, sets, outs) -> list[Callable[[], object]]:
    """ORT sessions on the CUDA provider with IO binding to the torch tensors (no copies)."""
    from env.build import toolchain
    from env.build.ort_runtime import cuda_provider_status

    usable, why = cuda_provider_status()
    if not usable:
        raise Unavailable(why)
    if not toolchain.read_record().get("build", {}).get("ort_cuda_kernels"):
        raise Unavailable("the ORT library was built without its CUDA kernel: "
                          + str(toolchain.read_record()["build"].get("ort_cuda_kernels_reason")))
    from onnx import TensorProto, helper

    from ops.ort.session import OrtConfig, create_session

    onnx_type = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16,
                 "float64": TensorProto.DOUBLE}[case.dtype]
    dims = [f"d{i}" for i in range(len(case.shape) - 1)] + [case.shape[-1]]
    graph = helper.make_graph(
        [helper.make_node("fused_norm", ["X", "weight", "bias"], ["Y"], domain="myops", epsilon=EPS)], "bench",
        [helper.make_tensor_value_info("X", onnx_type, dims),
         helper.make_tensor_value_info("weight", onnx_type, [case.shape[-1]]),
         helper.make_tensor_value_info("bias", onnx_type, [case.shape[-1]])],
        [helper.make_tensor_value_info("Y", onnx_type, dims)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("myops", 1)],
                              ir_version=10)
    session = create_session(model.SerializeToString(), OrtConfig(provider="cuda"))
    # numpy has no bfloat16: ORT's binding takes the ONNX type number there.
    element = {"float32": "float32", "float16": "float16", "float64": "float64"}.get(case.dtype, onnx_type)
    fns = []
    for (x, w, b), y in zip(sets, outs):
        binding = session.io_binding()
        try:
            for name, t in (("X", x), ("weight", w), ("bias", b)):
                binding.bind_input(name, "cuda", 0, element, list(t.shape), t.data_ptr())
            binding.bind_output("Y", "cuda", 0, element, list(y.shape), y.data_ptr())
        except (TypeError, RuntimeError) as error:
            raise Unavailable(f"ORT IO binding of {case.dtype} failed: {error}") from error
        fns.append(lambda s=session, bd=binding: s.run_with_iobinding(bd))
    return fns


def provider_callables(name: str, case: Case, sets, device: Device, compiled_cache: dict):
    """Zero-argument callables, one per input set, and the output each produces (for the value check)."""
    import torch

    import ops
    from ops.norms import native_norm, unfused_norm

    if name == "launch_floor_kernel":
        if not device.cuda:
            raise Unavailable("no CUDA device")
        return [lambda: torch.cuda._sleep(0) for _ in sets], None
    if name == "launch_floor_op":
        t = torch.empty(1, device=sets[0][0].device)
        return [lambda t=t: t.fill_(1.0) for _ in sets], None
    if name == "copy":
        dsts = [torch.empty_like(x) for x, _, _ in sets]
        return [lambda d=d, x=x: d.copy_(x) for d, (x, _, _) in zip(dsts, sets)], None
    if name == "unfused":
        return [lambda s=s: unfused_norm(*s, EPS) for s in sets], lambda s: unfused_norm(*s, EPS)
    if name == "native":
        return [lambda s=s: native_norm(*s, EPS) for s in sets], lambda s: native_norm(*s, EPS)
    if name == "compiled":
        # Every case is a new shape/dtype, i.e. a recompile of the same code
        # object; past dynamo's limit (8) it would silently run eager.
        for limit in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, limit):
                setattr(torch._dynamo.config, limit, 64)
        fn = compiled_cache.setdefault("fn", torch.compile(unfused_norm, dynamic=False, fullgraph=True))
        return [lambda s=s: fn(*s, EPS) for s in sets], lambda s: fn(*s, EPS)
    if name == "fused":
        return [lambda s=s: ops.fused_norm(*s, EPS) for s in sets], lambda s: ops.fused_norm(*s, EPS)
    if name == "fused_out":
        outs = [torch.empty_like(x) for x, _, _ in sets]
        return ([lambda s=s, o=o: ops.fused_norm_out(*s, EPS, o) for s, o in zip(sets, outs)],
                lambda s: ops.fused_norm_out(*s, EPS, torch.empty_like(s[0])))
    if name == "ort":
        if not device.cuda:
            raise Unavailable("no CUDA device")
        outs = [torch.empty_like(x) for x, _, _ in sets]
        fns = ort_callable(case, sets, outs)

        def first_output(s, fn=fns[0], out=outs[0]):
            out.fill_(float("nan"))
            fn()
            return out

        return fns, first_output
    raise ValueError(f"unknown provider {name!r}")


def value_check(case: Case, sets, output_of) -> str:
    """Max |y - ref| / max |ref| of one call against float64; raises if it exceeds the sanity bound."""
    x, w, b = sets[0]
    y = output_of(sets[0])
    x64, w64, b64 = x.double(), w.double(), b.double()
    ref = x64 * (x64.pow(2).mean(-1, keepdim=True) + EPS).rsqrt() * w64 + b64
    err = float(((y.double() - ref).abs().max() / ref.abs().max()))
    if not math.isfinite(err) or err > SANITY[case.dtype]:
        raise RuntimeError(f"wrong values: max error {err:.3g} of max |ref| (bound {SANITY[case.dtype]})")
    return f"value check {err:.2g}"


def bench_case(case: Case, args, device: Device, common: dict, deadline: float) -> list[Row]:
    import torch

    dev = "cuda" if device.cuda else "cpu"
    elem = torch.empty((), dtype=getattr(torch, case.dtype)).element_size()
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 * 2**20) if device.cuda else 32 * 2**20
    count = input_set_count(case, elem, l2)
    sets = make_input_sets(case, count, dev, seed=args.seed)
    numel, hidden = math.prod(case.shape), case.shape[-1]
    norm_bytes = 2 * numel * elem + 2 * hidden * elem
    copy_bytes = 2 * numel * elem
    eager_timer = CudaTimer() if device.cuda else HostTimer(False)
    rows: list[Row] = []
    compiled_cache: dict = {}

    def row(provider: str, mode: str, status: str, m: Measurement | None = None, note: str = "") -> Row:
        r = Row(**common, case=case.label, shape="x".join(map(str, case.shape)), dtype=case.dtype, provider=provider,
                mode=mode, status=status, note=note)
        if m is not None:
            r.median_us = round(m.median_us, 3)
            r.min_us = round(min(m.per_call_s) * 1e6, 3)
            r.max_us = round(max(m.per_call_s) * 1e6, 3)
            r.reps, r.calls_per_rep = len(m.per_call_s), m.calls
            r.bytes_per_call = copy_bytes if provider == "copy" else (norm_bytes if provider in NORM_PROVIDERS else 0)
            if r.bytes_per_call:
                r.gbps = round(r.bytes_per_call / (r.median_us * 1e-6) / 1e9, 1)
            r.note = "; ".join(filter(None, [note, m.note]))
        rows.append(r)
        return r

    for provider in PROVIDERS:
        if time.time() > deadline:
            row(provider, "eager", "skipped: time budget spent")
            continue
        try:
            fns, output_of = provider_callables(provider, case, sets, device, compiled_cache)
        except Unavailable as why:
            row(provider, "eager", f"unavailable: {why}")
            continue
        except Exception as error:
            row(provider, "eager", f"error: {type(error).__name__}: {error}")
            continue
        notes = []
        try:
            start = time.perf_counter()
            for fn in fns + fns:  # warm-up: allocator, lazy init, compilation (and its first replays)
                fn()
            if device.cuda:
                torch.cuda.synchronize()
            if provider == "compiled":
                notes.append(f"compile+warm-up {time.perf_counter() - start:.1f} s")
            if output_of is not None:
                notes.append(value_check(case, sets, output_of))
        except Exception as error:
            row(provider, "eager", f"error: {type(error).__name__}: {str(error)[:300]}")
            continue
        note = "; ".join(notes)
        step = lambda i, fns=fns: fns[i % len(fns)]()  # noqa: E731
        try:
            if provider == "ort":
                # ORT runs on its own stream and synchronises at the end of each run.
                row(provider, "host_sync", "ok", measure(HostTimer(True), step, args.reps, args.rep_s, 20_000), note)
            else:
                row(provider, "eager", "ok", measure(eager_timer, step, args.reps, args.rep_s, 20_000), note)
        except Exception as error:
            row(provider, "eager", f"error: {type(error).__name__}: {str(error)[:300]}", note=note)
        if provider == "ort":
            continue
        if not device.cuda:
            row(provider, "graph", "unavailable: CUDA graphs need a CUDA device")
            continue
        try:
            row(provider, "graph", "ok", measure_graph(fns, args.reps, args.rep_s), note)
        except Exception as error:
            torch.cuda.synchronize()
            row(provider, "graph", f"error: {type(error).__name__}: {str(error)[:300]}", note=note)
    del sets
    if device.cuda:
        torch.cuda.empty_cache()
    add_ratios(rows)
    return rows


def add_ratios(rows: list[Row]) -> None:
    """Ratios against the copy, native and launch-floor rows of the same case and mode."""
    def find(provider, mode):
        return next((r for r in rows if r.provider == provider and r.mode == mode and r.status == "ok"), None)

    for r in rows:
        if r.status != "ok" or r.median_us is None:
            continue
        mode = "eager" if r.mode == "host_sync" else r.mode
        copy, native, floor = find("copy", mode), find("native", mode), find("launch_floor_kernel", mode)
        if copy and r.provider in NORM_PROVIDERS:
            r.frac_of_copy = round(copy.median_us / r.median_us, 3)
        if native and r.provider in NORM_PROVIDERS:
            r.vs_native = round(r.median_us / native.median_us, 3)
        if floor and r.provider != "launch_floor_kernel":
            r.vs_launch_floor = round(r.median_us / floor.median_us, 3)


def write_csv(rows: list[Row], path: Path) -> None:
    from env.files import write_atomic

    names = [f.name for f in fields(Row)]

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=names)
            writer.writeheader()
            for r in rows:
                writer.writerow({k: ("" if v is None else v) for k, v in asdict(r).items()})

    write_atomic(path, write)


# --- targets and the closing table ----------------------------------------------------------


def evaluate_targets(rows: list[Row]) -> list[dict]:
    def get(case, provider, mode):
        return next((r for r in rows if r.case == case and r.provider == provider and r.mode == mode
                     and r.status == "ok"), None)

    results = []
    big = "4096x8192 bfloat16"
    for mode in ("graph", "eager"):
        fused, copy, native = get(big, "fused", mode), get(big, "copy", mode), get(big, "native", mode)
        if fused and copy:
            frac = copy.median_us / fused.median_us
            results.append({"target": f"{big} fused >= 85% of copy bandwidth ({mode})", "value": round(frac, 3),
                            "met": frac >= 0.85, "detail": f"fused {fused.gbps} GB/s, copy {copy.gbps} GB/s"})
        if fused and native:
            ratio = fused.median_us / native.median_us
            results.append({"target": f"{big} fused at least as fast as native ({mode})", "value": round(ratio, 3),
                            "met": ratio <= 1.0, "detail": f"fused {fused.median_us} us, native {native.median_us} us"})
    small = "1x8x512 bfloat16"
    # Device side (graph replay): against an empty kernel. From Python (eager):
    # against the cheapest op launch through torch's dispatcher (a 1-element
    # fill_), since every custom op pays that path; the raw empty kernel
    # (torch.cuda._sleep(0), no dispatcher) is in the CSV for reference.
    for mode, floor_name, what in (("graph", "launch_floor_kernel", "an empty kernel"),
                                   ("eager", "launch_floor_op", "a 1-element fill_ op")):
        fused, floor = get(small, "fused", mode), get(small, floor_name, mode)
        if fused and floor:
            ratio = fused.median_us / floor.median_us
            results.append({"target": f"{small} fused within 1.3x of {what} ({mode})",
                            "value": round(ratio, 3), "met": ratio <= 1.3,
                            "detail": f"fused {fused.median_us} us, {floor_name} {floor.median_us} us"})
    return results


def format_table(rows: list[Row]) -> str:
    shown = ["launch_floor_kernel", "copy", "unfused", "native", "compiled", "fused", "fused_out", "ort"]
    heads = {"launch_floor_kernel": "empty", "fused_out": "fused_out"}
    lines = []
    for mode in ("graph", "eager"):
        cases = list(dict.fromkeys(r.case for r in rows))
        lines.append(f"median us per call, {mode} (ort: host-synchronised)" if mode == "eager"
                     else "median us per call, CUDA graph replay (device time)")
        lines.append(f"{'case':<22}" + "".join(f"{heads.get(p, p):>11}" for p in shown) + f"{'fused GB/s':>12}")
        for case in cases:
            cells = []
            for p in shown:
                m = "host_sync" if (p == "ort" and mode == "eager") else mode
                r = next((r for r in rows if r.case == case and r.provider == p and r.mode == m), None)
                cells.append(f"{r.median_us:>11.2f}" if r and r.status == "ok" else f"{'-':>11}")
            fused = next((r for r in rows if r.case == case and r.provider == "fused" and r.mode == mode
                          and r.status == "ok"), None)
            lines.append(f"{case:<22}" + "".join(cells) + f"{(fused.gbps if fused else '-'):>12}")
    return "\n".join(lines)


# --- main -------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or REPO_ROOT / "build" / "gpu-check"),
                   help="where the CSV and reports go ($OUT on the device machine)")
    p.add_argument("--build-dir", type=Path, default=DEFAULT_BUILD_DIR, help="FUSEDBENCH_BUILD_DIR for this run")
    p.add_argument("--label", default="", help="free text recorded in every row, e.g. the git commit")
    p.add_argument("--dry-run", action="store_true", help="CPU path: build, compile check, tests (skip), CSV")
    p.add_argument("--skip-build", action="store_true", help="use the library already in --build-dir")
    p.add_argument("--no-tests", action="store_true", help="skip the pytest step")
    p.add_argument("--no-bench", action="store_true", help="skip the benchmarks")
    p.add_argument("--cases", default="", help="comma-separated case indices of GPU_CASES to run (default all)")
    p.add_argument("--reps", type=int, default=7, help="timed repetitions per measurement (median reported)")
    p.add_argument("--rep-s", type=float, default=0.02, help="seconds per timed repetition")
    p.add_argument("--seed", type=int, default=int(time.time()) % 100_000, help="seed of the benchmark inputs")
    p.add_argument("--budget-s", type=float, default=420, help="wall-clock budget of the whole run")
    p.add_argument("--bench-reserve-s", type=float, default=180, help="part of the budget kept for benchmarks")
    p.add_argument("--prepare-carry", action="store_true", help="copy the ORT headers into build/device-carry and exit")
    args = p.parse_args(argv)
    if args.reps < 1 or args.rep_s <= 0 or args.budget_s <= 0:
        p.error("--reps must be >= 1, --rep-s and --budget-s > 0")
    return args


def selected_cases(args: argparse.Namespace, cuda: bool) -> list[Case]:
    pool = GPU_CASES if cuda else DRY_RUN_CASES
    if not args.cases:
        return pool
    try:
        return [pool[int(i)] for i in args.cases.split(",")]
    except (ValueError, IndexError):
        raise SystemExit(f"--cases must be indices 0..{len(pool) - 1} of {[c.label for c in pool]}") from None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.prepare_carry:
        return prepare_carry()
    started = time.time()
    deadline = started + args.budget_s
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    prepare_environment(args)

    import torch

    device = describe_device()
    if not device.cuda and not args.dry_run:
        log("no CUDA device visible: running the CPU path (as --dry-run)")
        args.dry_run = True
    log(f"device: {device.card} ({device.info}); torch {torch.__version__} CUDA {torch.version.cuda}; "
        f"python {platform.python_version()}; out {args.out}; build {args.build_dir}")

    summary: dict = {"card": device.card, "device_info": device.info, "torch": torch.__version__,
                     "label": args.label, "dry_run": args.dry_run, "problems": []}
    record, problems = step_build(args)
    summary["problems"] += problems
    if record is not None:
        from env.paths import toolchain_record_path

        shutil.copyfile(toolchain_record_path(), args.out / "toolchain.json")
        report = record.get("build", {}).get("cuda_resource_report", {})
        for key, name in (("json", "cuda_resource_report.json"), ("log", "ptxas.log")):
            if report.get(key) and Path(report[key]).exists():
                shutil.copyfile(report[key], args.out / name)
        summary["torch_cuda_kernels"] = record.get("build", {}).get("torch_cuda_kernels")
        summary["cuda_compile_check"] = {k: report.get(k) for k in ("status", "nvcc", "summary", "adapters")}
        summary["build_timings_s"] = record.get("timings_s")
    if not args.no_tests:
        summary["tests"] = step_tests(args, deadline)
        log(f"tests: {json.dumps({k: v for k, v in summary['tests'].items() if k != 'skip_reasons'})}")

    rows: list[Row] = []
    if not args.no_bench:
        try:
            import ops  # noqa: F401  (loads the library built above)
        except ImportError as error:
            summary["problems"].append(f"import ops: {error}")
            log(f"cannot benchmark: {error}")
        else:
            kernel = REPO_ROOT / "csrc" / "core" / "fused_norm_cuda.cu"
            common = {"label": args.label, "card": device.card, "device_info": device.info,
                      "torch": torch.__version__, "cuda": str(torch.version.cuda),
                      "kernel_sha256": hashlib.sha256(kernel.read_bytes()).hexdigest()[:16]}
            if args.dry_run:
                args.reps, args.rep_s = min(args.reps, 3), min(args.rep_s, 0.01)
            for case in selected_cases(args, device.cuda):
                log(f"bench {case.label}")
                rows += bench_case(case, args, device, common, deadline)
                write_csv(rows, args.out / "gpu_bench.csv")  # after every case: a cut-off run keeps its rows
            summary["targets"] = evaluate_targets(rows)
    summary["elapsed_s"] = round(time.time() - started, 1)
    from env.files import write_text_atomic

    write_text_atomic(args.out / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")

    # The short table last: the device tool returns the end of the output.
    if rows:
        print(format_table(rows))
        unavailable = sorted({f"{r.provider}: {r.status}" for r in rows if r.status != "ok"})
        for line in unavailable[:12]:
            print(f"  not measured - {line[:200]}")
    for t in summary.get("targets", []):
        print(f"TARGET {'met ' if t['met'] else 'MISSED'} {t['target']}: {t['value']} ({t['detail']})")
    tests = summary.get("tests", {})
    if tests:
        print(f"tests: {tests.get('passed')} passed, {tests.get('failures')} failed, {tests.get('errors')} errors, "
              f"{tests.get('skipped')} skipped; failed: {tests.get('failed_tests', [])[:5]}")
        for reason, n in list(tests.get("skip_reasons", {}).items())[:5]:
            print(f"  skipped {n}: {reason[:200]}")
    for problem in summary["problems"]:
        print(f"PROBLEM: {problem[:500]}")
    print(f"files in {args.out}: {', '.join(sorted(p.name for p in args.out.iterdir()))}; {summary['elapsed_s']} s")
    failed = bool(summary["problems"]) or bool(tests.get("failures")) or bool(tests.get("errors")) \
        or tests.get("exit_code") not in (0, 5, None)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
