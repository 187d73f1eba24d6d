"""The CUDA compile check of ``invoke build``: compile the kernels for every
pinned architecture and keep ptxas's resource report.

No GPU is needed. For each target of the pinned TORCH_CUDA_ARCH_LIST
("8.0;9.0+PTX" -> sm_80, sm_90 machine code and compute_90 PTX) nvcc compiles
csrc/core/fused_norm_cuda.cu to an object file under build/cuda/ with the
flags the torch extension uses, and ptxas reports each kernel's registers,
shared memory, stack frame and spills. The report is parsed into a table
(build/cuda/resource_report.json, raw log build/cuda/ptxas.log) and the
adapters that call the kernels (the torch CUDA impl and the ONNX Runtime CUDA
op) are compiled to objects too, as far as this machine's headers allow.
"""

from __future__ import annotations

import json
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from env.builder.commands import BuildError, run_logged
from env.builder.config import CXX_STANDARD_PORTABLE, CXX_STANDARD_TORCH, core_cuda_sources, pinned_cuda_arch_list
from env.builder.ptxas import (
    KernelResources,
    PtxasReportError,
    demangle,
    parse_ptxas_report,
    short_kernel_name,
    summarise,
)
from env.builder.toolchain import cxx_compiler
from env.builder.toolkit import NOT_FOUND, cuda_include_dir, find_cuda_toolkit
from env.files import write_text_atomic
from env.paths import build_dir, csrc_dir


class CudaCheckError(BuildError):
    """The CUDA compile check could not run or failed; the message says why."""


@dataclass(frozen=True)
class ArchTarget:
    """One entry of TORCH_CUDA_ARCH_LIST as nvcc sees it."""

    name: str  # "sm_80" (machine code) or "compute_90" (PTX only)
    gencode: str  # value of nvcc's -gencode
    machine_code: bool  # ptxas runs (and reports resources) only for machine code


def arch_targets(arch_list: str) -> list[ArchTarget]:
    """Targets of a TORCH_CUDA_ARCH_LIST ("8.0;9.0+PTX"), as cpp_extension expands it."""
    targets: list[ArchTarget] = []
    for entry in arch_list.replace(" ", ";").split(";"):
        if not entry:
            continue
        match = re.fullmatch(r"(\d+)\.(\d+)(a?)(\+PTX)?", entry)
        if not match:
            raise CudaCheckError(
                f"TORCH_CUDA_ARCH_LIST entry {entry!r} is not of the form 8.0, 9.0a or 9.0+PTX "
                "(named architectures are not accepted in the pinned list)"
            )
        cc = f"{match.group(1)}{match.group(2)}{match.group(3)}"
        targets.append(ArchTarget(f"sm_{cc}", f"arch=compute_{cc},code=sm_{cc}", True))
        if match.group(4):
            targets.append(ArchTarget(f"compute_{cc}", f"arch=compute_{cc},code=compute_{cc}", False))
    if not targets:
        raise CudaCheckError(f"TORCH_CUDA_ARCH_LIST {arch_list!r} names no architecture")
    return targets


def kernel_nvcc_base_flags() -> list[str]:
    """The project's own part of :func:`kernel_nvcc_flags` (the rest is torch's, keyed by its version)."""
    return [f"-std={CXX_STANDARD_PORTABLE}", "-O3"]


def kernel_nvcc_flags() -> list[str]:
    """The flags the torch extension compiles the .cu with (build_config + cpp_extension's defaults)."""
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    return [*kernel_nvcc_base_flags(), *COMMON_NVCC_FLAGS, f"-I{csrc_dir() / 'core'}"]


# --- compiling ------------------------------------------------------------------------


@dataclass(frozen=True)
class ObjectResult:
    target: str
    path: str
    log: str
    seconds: float


def cuda_dir() -> Path:
    return build_dir() / "cuda"


def _compile_kernel_object(nvcc: Path, target: ArchTarget, out: Path) -> ObjectResult:
    source = core_cuda_sources()[0]
    obj = out / f"{source.stem}.{target.name}.o"
    log = out / f"{source.stem}.{target.name}.log"
    cmd = [
        str(nvcc),
        *kernel_nvcc_flags(),
        f"-gencode={target.gencode}",
        "--resource-usage",
        "-c",
        str(source),
        "-o",
        str(obj),
    ]
    start = time.perf_counter()
    run_logged(cmd, log)
    return ObjectResult(target.name, str(obj), str(log), round(time.perf_counter() - start, 1))


def compile_kernels(nvcc: Path, targets: list[ArchTarget], out: Path) -> list[ObjectResult]:
    """One object per target, compiled in parallel (each nvcc is single-threaded)."""
    out.mkdir(parents=True, exist_ok=True)
    workers = max(1, min(len(targets), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda t: _compile_kernel_object(nvcc, t, out), targets))


def _torch_cuda_impl_check(out: Path) -> dict[str, Any]:
    """Compile csrc/torch/torch_cuda_impl.cpp to an object against the installed torch's headers.

    A CPU torch wheel ships the c10/ATen CUDA headers but not the generated
    c10/cuda/impl/cuda_cmake_macros.h; it only sets Windows export macros, so
    the check skips it (C10_CUDA_NO_CMAKE_CONFIGURE_FILE) where it is absent.
    Linking needs a CUDA build of torch and is left to the real extension build.
    """
    import torch
    from torch.utils.cpp_extension import include_paths

    source = csrc_dir() / "torch" / "torch_cuda_impl.cpp"
    cuda_include = cuda_include_dir()
    if cuda_include is None:
        return {"status": "skipped", "reason": "no CUDA include directory (cuda_runtime_api.h) found"}
    torch_includes = [Path(p) for p in include_paths()]
    flags = [
        f"-std={CXX_STANDARD_TORCH}",
        "-O3",
        "-fPIC",
        "-DFUSED_NORM_WITH_CUDA",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
    ]
    if not any((p / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").is_file() for p in torch_includes):
        flags.append("-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE")
    obj, log = out / "torch_cuda_impl.o", out / "torch_cuda_impl.log"
    cmd = [
        cxx_compiler(),
        *flags,
        f"-I{csrc_dir()}",
        *(f"-isystem{p}" for p in torch_includes),
        f"-isystem{cuda_include}",
        "-c",
        str(source),
        "-o",
        str(obj),
    ]
    run_logged(cmd, log)
    return {
        "status": "compiled",
        "object": str(obj),
        "log": str(log),
        "note": "compiled only; linking needs a CUDA build of torch",
    }


def _ort_cuda_op_check(out: Path) -> dict[str, Any]:
    """Compile csrc/ort/ort_cuda_op.cc to an object against the pinned ORT headers."""
    from env.builder.ort_headers import OrtHeadersError, ensure_ort_headers

    source = csrc_dir() / "ort" / "ort_cuda_op.cc"
    cuda_include = cuda_include_dir()
    if cuda_include is None:
        return {"status": "skipped", "reason": "no CUDA include directory (cuda_runtime_api.h) found"}
    try:
        headers = ensure_ort_headers()
    except OrtHeadersError as error:
        return {"status": "skipped", "reason": f"ONNX Runtime headers unavailable: {error}"}
    obj, log = out / "ort_cuda_op.o", out / "ort_cuda_op.log"
    cmd = [
        cxx_compiler(),
        f"-std={CXX_STANDARD_PORTABLE}",
        "-O3",
        "-fPIC",
        "-DORT_API_MANUAL_INIT",
        f"-I{csrc_dir()}",
        f"-I{csrc_dir() / 'ort'}",
        f"-isystem{headers.path}",
        f"-isystem{cuda_include}",
        "-c",
        str(source),
        "-o",
        str(obj),
    ]
    run_logged(cmd, log)
    return {"status": "compiled", "object": str(obj), "log": str(log), "ort_headers": headers.summary()}


# --- the whole check -------------------------------------------------------------------


@dataclass
class CudaCheckResult:
    report_path: Path
    log_path: Path
    report: dict[str, Any]


def compile_check(out: Path | None = None, arch_list: str | None = None, adapters: bool = True) -> CudaCheckResult:
    """Compile the kernels for every pinned target, parse the resource report, write it under ``out``."""
    out = out or cuda_dir()
    toolkit = find_cuda_toolkit()
    if toolkit is None:
        raise CudaCheckError(f"{NOT_FOUND}: no CUDA compile check")
    nvcc = toolkit.nvcc
    arch_list = arch_list or pinned_cuda_arch_list()
    targets = arch_targets(arch_list)
    objects = compile_kernels(nvcc, targets, out)

    raw_logs = [Path(o.log).read_text(errors="replace") for o in objects]
    log_path = write_text_atomic(out / "ptxas.log", "\n".join(raw_logs))
    try:
        parsed = [k for text in raw_logs for k in parse_ptxas_report(text)]
    except PtxasReportError as error:
        raise CudaCheckError(f"{error}; see {log_path}") from error
    readable = demangle([name for name, _, _ in parsed])
    kernels = [
        KernelResources(kernel=short_kernel_name(pretty), mangled=name, arch=arch, **numbers)
        for (name, arch, numbers), pretty in zip(parsed, readable, strict=True)
    ]
    machine_targets = [t.name for t in targets if t.machine_code]
    missing_arch = [t for t in machine_targets if not any(k.arch == t for k in kernels)]
    if missing_arch:
        raise CudaCheckError(f"ptxas reported no kernel for {missing_arch}; see {log_path}")

    report: dict[str, Any] = {
        "nvcc": str(nvcc),
        "nvcc_version": toolkit.version,
        "torch_cuda_arch_list": arch_list,
        "flags": kernel_nvcc_flags(),
        "targets": [asdict(t) for t in targets],
        "objects": [asdict(o) for o in objects],
        "kernels": [asdict(k) for k in sorted(kernels, key=lambda k: (k.kernel, k.arch))],
        "summary": summarise(kernels, machine_targets),
    }
    if adapters:
        out.mkdir(parents=True, exist_ok=True)
        report["adapters"] = {
            "torch_cuda_impl": _adapter(_torch_cuda_impl_check, out),
            "ort_cuda_op": _adapter(_ort_cuda_op_check, out),
        }
    report_path = write_text_atomic(out / "resource_report.json", json.dumps(report, indent=2) + "\n")
    return CudaCheckResult(report_path=report_path, log_path=log_path, report=report)


def _adapter(check, out: Path) -> dict[str, Any]:
    start = time.perf_counter()
    try:
        result = check(out)
    except BuildError as error:
        result = {"status": "failed", "error": str(error)}
    result["seconds"] = round(time.perf_counter() - start, 1)
    return result


# Set to 1 by a caller that needs a tree's libraries and not its check: an A/B run builds the commit it
# compares against to time it, and the check builds nothing a benchmark loads while it is the longest step
# of a build (40 s of 90 on 2 cores).
SKIP_VARIABLE = "FUSEDBENCH_SKIP_CUDA_CHECK"


# Why a benchmark's build (`invoke bench` builds first) leaves the check out.
FOR_BENCHMARKS = "a benchmark's build loads the libraries alone; `invoke build` runs it"


def skip_asked() -> bool:
    return os.environ.get(SKIP_VARIABLE) == "1"


def run_in_build(record: dict[str, Any]) -> None:
    """The `invoke build` step: run the check when nvcc exists, store its results in ``record``."""
    if skip_asked():
        reason = f"{SKIP_VARIABLE}=1: this build's libraries are wanted, not its CUDA check"
        record["build"]["cuda_resource_report"] = {"status": "skipped", "reason": reason}
        return
    if find_cuda_toolkit() is None:
        record["build"]["cuda_resource_report"] = {"status": "skipped", "reason": NOT_FOUND}
        return
    start = time.perf_counter()
    result = compile_check()
    seconds = round(time.perf_counter() - start, 1)
    report = result.report
    record["timings_s"]["cuda_compile_check"] = seconds
    record["artifacts"]["cuda_objects"] = {o["target"]: o["path"] for o in report["objects"]}
    record["build"]["cuda_resource_report"] = {
        "status": "compiled",
        "json": str(result.report_path),
        "log": str(result.log_path),
        "nvcc": report["nvcc_version"],
        "targets": [t["name"] for t in report["targets"]],
        "summary": report["summary"],
        "adapters": {name: a["status"] for name, a in report.get("adapters", {}).items()},
    }
    failed = [n for n, a in report.get("adapters", {}).items() if a["status"] == "failed"]
    if failed:
        raise CudaCheckError("; ".join(report["adapters"][n]["error"] for n in failed))
