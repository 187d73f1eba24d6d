"""The ONNX Runtime custom-op library built with AddressSanitizer and UndefinedBehaviorSanitizer.

Same sources, flags and export list as ``invoke build``'s library
(env/builder/ort_library.py), plus the sanitizers, into build/ort_sanitized/,
but the kernel core holds one version: the one the delivered core's loader
runs on this CPU. The others would never run here, so checking them is not
possible, and compiling them with the sanitizers took 264 s of one core
against 78 s for the one (2-vCPU Zen 3 VM).
A Python process loads it only with the ASan runtime preloaded (the
interpreter itself is not instrumented): :func:`sanitizer_env` gives that
environment, with every report written to a log file to be counted.
"""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from env.builder.commands import run_logged
from env.builder.cxx_runtime import SHARED_CXX_RUNTIME_FLAGS
from env.builder.ort_headers import ensure_ort_headers
from env.builder.ort_library import LIBRARY_NAME, common_sources, ort_cxx_flags
from env.builder.toolchain import cxx_compiler
from env.paths import build_dir, csrc_dir
from tests.helpers.cpu_levels import loaders_choice

# -O1 keeps reports readable; recovery on, so one run reports every UB finding rather than the first.
SANITIZER_FLAGS = ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined"]


def build_sanitized_library() -> Path:
    out = build_dir() / "ort_sanitized"
    (out / "obj").mkdir(parents=True, exist_ok=True)
    headers = ensure_ort_headers()
    sources = [*common_sources(), csrc_dir() / "ort" / "ort_cuda_op_stub.cc"]
    flags = [*ort_cxx_flags(), *SANITIZER_FLAGS, "-isystem", str(headers.path), "-I", str(csrc_dir())]
    core = csrc_dir() / "core" / "fused_norm_cpu.cpp"
    _, one_version = loaders_choice()
    objects = [out / "obj" / (s.relative_to(csrc_dir()).as_posix().replace("/", "__") + ".o") for s in sources]
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        jobs = [
            pool.submit(
                run_logged,
                [cxx_compiler(), *flags, *(one_version if s == core else []), "-c", str(s), "-o", str(o)],
                out / "logs" / f"{o.stem}.log",
            )
            for s, o in zip(sources, objects, strict=True)
        ]
        for job in jobs:
            job.result()
    library = out / LIBRARY_NAME
    link = [
        cxx_compiler(),
        "-shared",
        "-fPIC",
        *SANITIZER_FLAGS,
        *map(str, objects),
        f"-Wl,--version-script={csrc_dir() / 'ort' / 'exports.lds'}",
        *SHARED_CXX_RUNTIME_FLAGS,
        "-o",
        str(library),
    ]
    run_logged(link, out / "logs" / "link.log")
    return library


def _compiler_file(name: str) -> Path:
    path = subprocess.run(
        [cxx_compiler(), f"-print-file-name={name}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return Path(path).resolve()


def preloads() -> list[Path]:
    """The compiler's ASan runtime, then its libstdc++.

    The runtime must come first in an uninstrumented python. libstdc++ with it:
    ASan's __cxa_throw interceptor looks the real function up when it starts,
    and fails its first C++ throw (onnxruntime throws on every refused model)
    when libstdc++ is not loaded yet.
    """
    return [_compiler_file("libasan.so"), _compiler_file("libstdc++.so")]


def sanitizer_env(log_dir: Path) -> dict[str, str]:
    """This environment plus the preloaded ASan runtime and options writing every report under ``log_dir``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["LD_PRELOAD"] = " ".join(map(str, preloads()))
    # Leaks: the interpreter and onnxruntime keep allocations alive at exit by
    # design, so leak reports would be theirs. Every other ASan check stays on.
    env["ASAN_OPTIONS"] = f"detect_leaks=0:log_path={log_dir / 'asan'}:halt_on_error=1"
    env["UBSAN_OPTIONS"] = f"print_stacktrace=1:log_path={log_dir / 'ubsan'}:halt_on_error=0"
    return env


def sanitizer_reports(log_dir: Path) -> list[Path]:
    """The report files the sanitizers wrote (one per process that reported anything)."""
    return sorted(p for p in log_dir.iterdir() if p.name.startswith(("asan", "ubsan")))
