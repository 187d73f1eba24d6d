"""Build the ONNX Runtime custom-op library build/ort/libfused_norm_ort.so.

The library is csrc/ort/*.cc (entry point, shared op, per-provider adapters)
plus the same kernel core as the torch op (csrc/core): in a JIT build the very
objects the torch library's build compiled (env/builder/core_objects.py), else
compiled here. The adapters are plain C++17 against the official ORT headers
(env/builder/ort_headers.py). Each compiler call runs
through :func:`env.builder.commands.run_logged`; build/ort/build.log collects every
command line and its output in order.

CUDA: the library registers the CUDA provider's kernel too when built with
CUDA (csrc/ort/ort_cuda_op.cc + csrc/core/fused_norm_cuda.cu via nvcc, linked
to cudart); otherwise csrc/ort/ort_cuda_op_stub.cc registers nothing. The
choice: the ``with_cuda`` argument, else ``FUSEDBENCH_ORT_CUDA`` (1 = require,
0 = never), else automatic: on only when the CUDA sources, nvcc, cudart and a
working onnxruntime CUDA execution provider are all present.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from env.builder.commands import BuildError, run_logged
from env.builder.compiler_cache import compiler_cache_env
from env.builder.config import (
    CXX_STANDARD_PORTABLE,
    core_cpu_sources,
    core_cuda_sources,
    cxx_opt_flags,
    platform_cpu_sources,
)
from env.builder.cxx_runtime import SHARED_CXX_RUNTIME_FLAGS, check_shared_cxx_runtime
from env.builder.ort_headers import OrtHeaders, check_runtime_compatible, ensure_ort_headers
from env.builder.ort_runtime import cuda_provider_status, runtime_api
from env.builder.toolchain import cxx_compiler
from env.builder.toolkit import NOT_FOUND, CudaToolkit, find_cuda_toolkit
from env.files import atomic_path, write_text_atomic
from env.paths import build_dir, csrc_dir

LIBRARY_NAME = "libfused_norm_ort.so"


def ort_build_dir() -> Path:
    return build_dir() / "ort"


def _ort_dir() -> Path:
    return csrc_dir() / "ort"


def common_sources() -> list[Path]:
    """Sources of every build: entry point, shared op, CPU adapter, CPU core, the cache probe."""
    ort = _ort_dir()
    return [
        ort / "ort_library.cc",
        ort / "ort_norm_op.cc",
        ort / "ort_cpu_op.cc",
        ort / "ort_debug_dump.cc",
        *core_cpu_sources(),
        *platform_cpu_sources(),
    ]


def cuda_sources() -> list[Path]:
    """The CUDA provider's adapter (C++, needs the CUDA headers) and the CUDA core (nvcc)."""
    return [_ort_dir() / "ort_cuda_op.cc", *core_cuda_sources()]


# --- the CUDA decision -------------------------------------------------------


def cuda_link_toolkit() -> tuple[CudaToolkit | None, str]:
    """The CUDA toolkit when it has the headers and cudart the provider links, or None and why not."""
    toolkit = find_cuda_toolkit()
    if toolkit is None:
        return None, NOT_FOUND
    if toolkit.library_dir is None:
        return None, f"libcudart.so not found under {toolkit.home}/lib64 or {toolkit.home}/lib"
    return toolkit, f"CUDA toolkit {toolkit.home}"


def decide_cuda(with_cuda: bool | None = None) -> tuple[bool, str]:
    """Whether to compile the CUDA provider's kernel into the library, and why."""
    if with_cuda is None:
        forced = os.environ.get("FUSEDBENCH_ORT_CUDA")
        if forced not in (None, "", "0", "1"):
            raise BuildError(f"FUSEDBENCH_ORT_CUDA must be 1 (require CUDA) or 0 (CPU only), got {forced!r}")
        with_cuda = None if forced in (None, "") else forced == "1"
    if with_cuda is False:
        return False, "CUDA disabled (with_cuda=False / FUSEDBENCH_ORT_CUDA=0)"

    missing = [str(p.relative_to(csrc_dir().parent)) for p in cuda_sources() if not p.exists()]
    toolkit, toolkit_reason = cuda_link_toolkit()
    if with_cuda is True:
        # Required: build for CUDA even if this machine's onnxruntime cannot
        # run it (e.g. a compile check, or a library for another machine).
        if missing:
            raise BuildError(f"CUDA build requested but {', '.join(missing)} missing")
        if toolkit is None:
            raise BuildError(f"CUDA build requested but {toolkit_reason}")
        return True, f"CUDA required (FUSEDBENCH_ORT_CUDA=1 / with_cuda=True); {toolkit_reason}"
    if missing:
        return False, f"CUDA sources not present ({', '.join(missing)})"
    if toolkit is None:
        return False, toolkit_reason
    usable, provider_reason = cuda_provider_status()
    if not usable:
        return False, provider_reason
    return True, f"{toolkit_reason}; {provider_reason}"


def nvcc_arch_flags() -> list[str]:
    """-gencode flags of the pinned TORCH_CUDA_ARCH_LIST (environment.lock.yml), as the CUDA compile check uses."""
    from env.builder.config import pinned_cuda_arch_list
    from env.builder.cuda import arch_targets

    return [f"-gencode={target.gencode}" for target in arch_targets(pinned_cuda_arch_list())]


# --- compile and link --------------------------------------------------------


@dataclass(frozen=True)
class Step:
    name: str  # shown in build.log
    command: list[str]
    log: Path
    # Runs through ccache where it is installed (env/builder/compiler_cache.py): the C++ compiles; nvcc runs as it is.
    cached: bool = True


def _object_path(source: Path, objects: Path) -> Path:
    return objects / (source.relative_to(csrc_dir()).as_posix().replace("/", "__") + ".o")


def ort_cxx_flags() -> list[str]:
    """C++ flags of every ORT library object, less the include folders."""
    return [f"-std={CXX_STANDARD_PORTABLE}", *cxx_opt_flags(), "-fPIC", "-Wall", "-Wextra", "-DORT_API_MANUAL_INIT"]


def _plan(headers: OrtHeaders, with_cuda: bool, out: Path) -> tuple[list[Step], list[Step], list[str], list[str]]:
    """The compile steps of the adapters and the CUDA core, those of the CPU core (independent, run in parallel),
    the link's extra arguments, and the C++ flags used."""
    objects, logs = out / "obj", out / "logs"
    cxx = cxx_compiler()
    cxx_flags = [
        *ort_cxx_flags(),
        # -isystem: warnings of the ORT headers are not ours to fix.
        "-isystem",
        str(headers.path),
        "-I",
        str(csrc_dir()),
    ]
    core = core_cpu_sources() + platform_cpu_sources()
    sources = [s for s in common_sources() if s not in core] + (
        [_ort_dir() / "ort_cuda_op.cc"] if with_cuda else [_ort_dir() / "ort_cuda_op_stub.cc"]
    )
    link_extra: list[str] = []
    if with_cuda:
        toolkit, reason = cuda_link_toolkit()
        if toolkit is None:
            raise BuildError(f"CUDA build: {reason}")
        cxx_flags += ["-isystem", str(toolkit.include_dir)]
        link_extra = [f"-L{toolkit.library_dir}", f"-Wl,-rpath,{toolkit.library_dir}", "-lcudart"]

    def compile_step(source: Path) -> Step:
        obj = _object_path(source, objects)
        return Step(
            f"compile {source.relative_to(csrc_dir())}",
            [cxx, *cxx_flags, "-c", str(source), "-o", str(obj)],
            logs / f"{obj.stem}.log",
        )

    compiles = [compile_step(source) for source in sources]
    if with_cuda:
        from env.builder.cuda import kernel_nvcc_flags

        for source in core_cuda_sources():
            obj = _object_path(source, objects)
            # The torch extension's nvcc flags, so both libraries run the same machine code.
            nvcc = [
                str(toolkit.nvcc),
                *kernel_nvcc_flags(),
                *nvcc_arch_flags(),
                "-Xcompiler",
                "-fPIC",
                "-I",
                str(csrc_dir()),
                "-c",
                str(source),
                "-o",
                str(obj),
            ]
            compiles.append(
                Step(f"nvcc {source.relative_to(csrc_dir())}", nvcc, logs / f"{obj.stem}.log", cached=False)
            )
    return compiles, [compile_step(source) for source in core], link_extra, cxx_flags


def _object_of(step: Step) -> str:
    return step.command[step.command.index("-o") + 1]


def _link(objects: list[str], link_extra: list[str], library_tmp: Path, logs: Path) -> Step:
    return Step(
        "link",
        [
            cxx_compiler(),
            "-shared",
            "-fPIC",
            *cxx_opt_flags(),
            *objects,
            f"-Wl,--version-script={_ort_dir() / 'exports.lds'}",
            "-Wl,--no-undefined",
            *link_extra,
            *SHARED_CXX_RUNTIME_FLAGS,  # one C++ runtime in onnxruntime's process (env/builder/cxx_runtime.py)
            "-o",
            str(library_tmp),
        ],
        logs / "link.log",
    )


def _compile_all(steps: list[Step]) -> None:
    if not steps:
        return
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        # The C++ compiles run through ccache where it is installed, as the torch library's do: another
        # checkout of the same sources (an A/B run's base) reuses their objects.
        cache = compiler_cache_env()
        runs = [pool.submit(run_logged, s.command, s.log, env=cache if s.cached else None) for s in steps]
        for future in runs:
            future.result()


def _collect_log(steps: list[Step], target: Path) -> None:
    parts = [
        f"### {step.name}\n{step.log.read_text(errors='replace') if step.log.exists() else '(not run)'}"
        for step in steps
    ]
    write_text_atomic(target, "\n".join(parts))


def build_ort_library(
    record: dict[str, Any],
    with_cuda: bool | None = None,
    core_objects: Callable[[], list[Path] | None] | None = None,
) -> Path:
    """Compile build/ort/libfused_norm_ort.so and record headers, artifact and timing in ``record``.

    ``core_objects``: waits for the kernel core's objects compiled by the torch library's build and returns
    them, or None where there are none to share (env/builder/core_objects.py); the adapters compile meanwhile.
    Without it, or where it gives None, the library compiles its own core."""
    start = time.perf_counter()
    out = ort_build_dir()
    (out / "obj").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(parents=True, exist_ok=True)

    headers = ensure_ort_headers()
    try:
        runtime = runtime_api()
    except RuntimeError as error:
        raise BuildError(f"cannot tell which ONNX Runtime C API the installed onnxruntime serves: {error}") from error
    check_runtime_compatible(headers, runtime.api_version, runtime.version)
    use_cuda, cuda_reason = decide_cuda(with_cuda)
    build = record.setdefault("build", {})
    build["ort_headers"] = {
        "source": headers.source,
        "version": headers.version,
        "sha256": headers.sha256,
        "api_version": headers.api_version,
        "runtime_api_version": runtime.api_version,
        "runtime_api_how": runtime.how,
        "path": str(headers.path),
        "summary": f"{headers.summary()}; runtime onnxruntime {runtime.version} serves API <= {runtime.api_version}",
    }
    build["ort_cuda_kernels"] = use_cuda
    build["ort_cuda_kernels_reason"] = cuda_reason

    library = out / LIBRARY_NAME
    # Link to a temporary name and rename: a process that has the old library
    # mapped keeps a valid file, and nobody ever loads a half-written one.
    with atomic_path(library) as library_tmp:
        compiles, core_compiles, link_extra, cxx_flags = _plan(headers, use_cuda, out)
        build["ort_cxx_flags"] = cxx_flags
        ran = compiles + (core_compiles if core_objects is None else [])
        link = None
        try:
            _compile_all(ran)
            shared = core_objects() if core_objects is not None else None
            if core_objects is not None and shared is None:
                ran += core_compiles  # nothing to share: this library's own core, after its adapters
                _compile_all(core_compiles)
            build["ort_kernel_core"] = (
                f"the torch op library's objects ({', '.join(p.name for p in shared)}), linked here"
                if shared is not None
                else "compiled here, with the flags above"
            )
            link = _link(
                [_object_of(s) for s in ran] + [str(p) for p in shared or []], link_extra, library_tmp, out / "logs"
            )
            run_logged(link.command, link.log)
        finally:
            _collect_log([*ran, *([link] if link else [])], out / "build.log")
        build["ort_cxx_runtime"] = check_shared_cxx_runtime(library_tmp)

    record.setdefault("artifacts", {})["ort_library"] = str(library)
    record.setdefault("timings_s", {})["ort_library"] = round(time.perf_counter() - start, 1)
    return library


__all__ = ["LIBRARY_NAME", "build_ort_library", "cuda_link_toolkit", "decide_cuda", "nvcc_arch_flags", "ort_build_dir"]
