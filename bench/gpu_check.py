"""``invoke gpu-check``: check and benchmark fusedbench on a CUDA machine; leave every file worth keeping in one folder.

Steps (each one's outcome goes to <out>/summary.json; a failed step does not stop the later ones):
  1. build the torch op library (with its CUDA kernels), the ONNX Runtime library and the CUDA
     compile check against this machine's own torch - a build must match the torch that loads it;
  2. the GPU tests (`pytest -m gpu`, in --test-jobs processes), then ONNX Runtime's CUDA tests
     (bench/gpu_check_ort.py: the custom route with IO binding on device memory, both ops' models by each
     route with the fused node in the optimised graph) where ORT's CUDA provider runs, else skipped
     with the reason, which summary.json's "ort_cuda" also gives for the ORT bench rows and serving;
  3. the benchmark: `invoke bench --device cuda --baseline all` (the same harness, report, plot and
     targets as on the CPU), its report written under <out>/reports;
  4. the kernel tests that reach every kernel variant and alignment path once more under
     compute-sanitizer (memcheck, then racecheck) where it is installed: last, because an
     instrumented run is the slowest step and the one a time limit should cut;
  5. the toolchain record and the CUDA resource report (ptxas) copied into <out>.

--time-limit bounds the whole check (GPU machines are often booked by the minute): each pytest run
gets at most the time left, and a step that cannot start with a useful amount left is skipped,
saying so.

<out> is --out, else $OUT, else build/gpu-check. With --dry-run the same steps run as far as a
machine without a GPU can take them: the build, the tests (GPU tests skip, saying why), no
sanitizer, and the benchmark on the CPU's quick grid. Where npm cannot fetch the ONNX Runtime
headers, pass --ort-headers with the include/ folder of an official ONNX Runtime release.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.gpu_check_ort import ORT_CUDA_SELECTION, ORT_CUDA_TEST_FILES, ort_cuda_items
from env.builder.toolkit import find_cuda_toolkit
from env.paths import REPO_ROOT, build_dir

# every kernel variant of both ops (the add + norm in place too), every dtype
KERNEL_TESTS = ["tests/ops/test_cuda_op.py", "tests/ops/test_op_values.py", "tests/ops/test_cuda_add_norm_op.py"]
SANITIZER_TOOLS = ("memcheck", "racecheck")
# Under the sanitizer: the tests that launch every kernel variant of both ops in every dtype and take
# each alignment path (odd offsets, other phases of out, residual or x). The whole files would take
# hours instrumented (the > 2**31-element rows alone are gigabytes), and add no kernel code path.
SANITIZER_SELECTION = "every_variant or every_add_variant or misaligned or storage_offset or one_element_off or strided"
MIN_STEP_S = {"pytest": 30.0, "bench": 60.0}  # less time left than this: the step is skipped


@dataclass
class GpuCheckOptions:
    out: Path | None = None  # default $OUT, else build/gpu-check
    dry_run: bool = False  # the path a machine without a GPU can take
    baseline: str = "all"  # the benchmark's --baseline
    quick: bool = False  # the benchmark's quick grid
    skip_build: bool = False  # use the library of the last build
    no_tests: bool = False  # skip the tests and the sanitizer runs
    no_bench: bool = False  # skip the benchmark
    ort_headers: Path | None = None  # ONNX Runtime include/ folder, where npm cannot fetch it
    test_timeout_s: int = 900  # limit for each pytest run
    test_jobs: int = 1  # processes for the GPU tests (pytest-xdist), all on the one device
    time_limit_s: float | None = None  # the whole check; None: no limit
    sanitizer_selection: str = SANITIZER_SELECTION  # pytest -k expression for the sanitizer runs
    started: float = 0.0  # time.monotonic() at the start of main

    def time_left(self) -> float:
        if self.time_limit_s is None:
            return float("inf")
        return self.time_limit_s - (time.monotonic() - self.started)


def log(message: str) -> None:
    print(f"[gpu-check {time.strftime('%H:%M:%S')}] {message}", flush=True)


def step_build(args: GpuCheckOptions) -> dict:
    if args.ort_headers:
        os.environ["FUSEDBENCH_ORT_HEADERS"] = str(args.ort_headers.resolve())
    toolkit = find_cuda_toolkit()
    if toolkit:  # torch's extension builder reads CUDA_HOME when nvcc is not on PATH
        os.environ.setdefault("CUDA_HOME", str(toolkit.home))
    log(f"CUDA toolkit: {toolkit.home} (nvcc {toolkit.version})" if toolkit else "CUDA toolkit: none found")
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 1))
    if args.skip_build:
        return {"status": "skipped (--skip-build)"}
    from env.builder.steps import build

    started = time.perf_counter()
    try:
        build("jit")
    except Exception as error:  # the torch library may exist even if a later step failed: keep going
        return {"status": "failed", "error": f"{type(error).__name__}: {error}"}
    return {"status": "ok", "seconds": round(time.perf_counter() - started, 1)}


def run_pytest(args: GpuCheckOptions, name: str, pytest_args: list[str], prefix: list[str] = ()) -> dict:
    left = args.time_left()
    if left < MIN_STEP_S["pytest"]:
        return {"status": f"skipped (time limit: {max(left, 0):.0f} s left)"}
    timeout = int(min(args.test_timeout_s, left))
    junit = args.out / f"{name}.xml"
    command = [
        *prefix,
        sys.executable,
        "-m",
        "pytest",
        *pytest_args,
        "-q",
        "-rs",
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit}",
    ]
    log(f"{name}: {' '.join(command)}")
    with open(args.out / f"{name}.log", "w") as output:
        try:
            code = subprocess.run(
                command,
                cwd=REPO_ROOT,
                stdout=output,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            ).returncode
        except subprocess.TimeoutExpired:
            return {"status": f"timed out after {timeout} s", "log": f"{name}.log"}
    # pytest: 0 passed, 5 nothing collected (every test deselected); anything else is a failure.
    return {"status": "ok" if code in (0, 5) else f"failed (exit {code})", "junit": junit.name, "log": f"{name}.log"}


def step_gpu_tests(args: GpuCheckOptions) -> dict:
    jobs = ["-n", str(args.test_jobs)] if args.test_jobs > 1 else []
    # ONNX Runtime's CUDA tests are a step of their own (step_ort_cuda), which says why when it cannot run.
    return run_pytest(args, "gpu_tests", ["-m", "gpu", "-k", f"not ({ORT_CUDA_SELECTION})", *jobs, "tests"])


def step_ort_cuda(args: GpuCheckOptions, cuda: bool) -> tuple[dict, dict]:
    """The ORT-on-CUDA tests where ORT's CUDA provider runs here; and every ORT-on-CUDA item's reason, if skipped."""
    items = ort_cuda_items(cuda)
    reason = items["ort_cuda_tests"]
    if reason is not None:
        step = {"status": f"skipped ({reason})"}
    else:
        step = run_pytest(args, "ort_cuda_tests", ["-m", "gpu", "-k", ORT_CUDA_SELECTION, *ORT_CUDA_TEST_FILES])
    return step, {item: why or "runs" for item, why in items.items()}


def step_sanitizer(args: GpuCheckOptions, cuda: bool) -> dict:
    results = {}
    sanitizer = shutil.which("compute-sanitizer")
    for tool in SANITIZER_TOOLS:
        if not cuda or sanitizer is None:
            why = "no CUDA device" if not cuda else "compute-sanitizer is not installed"
            results[f"sanitizer_{tool}"] = {"status": f"skipped ({why})"}
            continue
        prefix = [sanitizer, "--tool", tool, "--error-exitcode", "86"]
        selection = ["-m", "gpu", "-k", args.sanitizer_selection, *KERNEL_TESTS]
        results[f"sanitizer_{tool}"] = run_pytest(args, f"sanitizer_{tool}", selection, prefix)
    return results


def step_bench(args: GpuCheckOptions, cuda: bool) -> dict:
    from bench.plan.options import BenchOptions
    from bench.run import main

    left = args.time_left()
    if left < MIN_STEP_S["bench"]:
        return {"status": f"skipped (time limit: {max(left, 0):.0f} s left)"}

    options = BenchOptions(
        baseline=args.baseline,
        device="cuda" if cuda else "cpu",
        quick=args.quick or not cuda,
        out_dir=args.out / "reports",
    )
    log(f"bench: --device {options.device} --baseline {options.baseline}" + (" --quick" if options.quick else ""))
    try:
        code = main(options)
    except ValueError as error:
        return {"status": "failed", "error": str(error)}
    reports = sorted(p.name for p in (args.out / "reports").glob("*.csv"))
    return {"status": "ok" if code == 0 else "failed (some baselines failed; listed above)", "reports": reports}


def copy_build_records(out: Path) -> dict:
    from env.builder import toolchain
    from env.paths import toolchain_record_path

    if not toolchain_record_path().exists():
        return {"status": "no toolchain record"}
    shutil.copyfile(toolchain_record_path(), out / "toolchain.json")
    report = toolchain.read_record().get("build", {}).get("cuda_resource_report", {})
    copied = ["toolchain.json"]
    for key, name in (("json", "cuda_resource_report.json"), ("log", "ptxas.log")):
        if report.get(key) and Path(report[key]).exists():
            shutil.copyfile(report[key], out / name)
            copied.append(name)
    return {"status": "ok", "files": copied}


def main(args: GpuCheckOptions) -> int:
    """Run every step; write <out>/summary.json; 1 if a step failed, else 0."""
    args.out = Path(args.out or os.environ.get("OUT") or build_dir() / "gpu-check").resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    args.started = time.monotonic()
    started = time.time()
    summary: dict = {"steps": {}, "time_limit_s": args.time_limit_s, "test_jobs": args.test_jobs}
    summary["steps"]["build"] = step_build(args)
    log(f"build: {summary['steps']['build']['status']}")

    from bench.plan.devices import cuda_missing_reason

    reason = cuda_missing_reason()
    cuda = reason is None and not args.dry_run
    if reason is not None and not args.dry_run:
        log(f"{reason}: running the CPU path (as --dry-run)")
    import torch

    summary.update(
        torch=torch.__version__,
        cuda=str(torch.version.cuda),
        dry_run=not cuda,
        device=torch.cuda.get_device_name() if cuda else f"cpu ({reason or '--dry-run'})",
    )
    if not args.no_tests:
        summary["steps"]["gpu_tests"] = step_gpu_tests(args)
        log(f"gpu tests: {summary['steps']['gpu_tests']['status']}")
        summary["steps"]["ort_cuda_tests"], summary["ort_cuda"] = step_ort_cuda(args, cuda)
        log(f"ort cuda tests: {summary['steps']['ort_cuda_tests']['status']}")
    summary["steps"]["bench"] = {"status": "skipped (--no-bench)"} if args.no_bench else step_bench(args, cuda)
    log(f"bench: {summary['steps']['bench']['status']}")
    if not args.no_tests:
        summary["steps"].update(step_sanitizer(args, cuda))
    summary["steps"]["records"] = copy_build_records(args.out)
    summary["elapsed_s"] = round(time.time() - started, 1)

    from env.files import write_text_atomic

    write_text_atomic(args.out / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
    for name, step in summary["steps"].items():
        print(f"{name:<20} {step['status']}" + (f" - {step['error'][:300]}" if "error" in step else ""))
    print(f"files in {args.out}: {', '.join(sorted(p.name for p in args.out.iterdir()))}; {summary['elapsed_s']} s")
    failed = [name for name, step in summary["steps"].items() if not step["status"].startswith(("ok", "skipped"))]
    return 1 if failed else 0
