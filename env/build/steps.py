"""``invoke build``: record the toolchain, then compile every artifact from csrc/.

Order matters: the record is written *before* compiling, so a failed build
still leaves the facts needed to understand it. After each step the record is
rewritten with the artifact paths and timings; ``import ops`` finds the
libraries through it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from env.build import toolchain
from env.build.config import (
    CXX_STANDARD_PORTABLE,
    CXX_STANDARD_TORCH,
    cuda_build_possible,
    cxx_opt_flags,
    march_native_requested,
    pinned_cuda_arch_list,
    torch_extension_spec,
)
from env.build.cuda import run_in_build as cuda_compile_check
from env.build.ort_library import build_ort_library
from env.paths import build_dir, toolchain_record_path
from env.build.torch_library import build_aot, build_jit


@dataclass
class BuildResult:
    record: dict[str, Any]
    record_path: Path


def _settings(mode: str) -> dict[str, Any]:
    import torch

    with_cuda, cuda_reason = cuda_build_possible()
    return {
        "mode": mode,
        "cxx_standard": {
            "torch_extension": CXX_STANDARD_TORCH,
            "kernel_core_in_torch_extension": CXX_STANDARD_TORCH,
            "ort_library": CXX_STANDARD_PORTABLE,
            "cuda_objects": CXX_STANDARD_PORTABLE,
        },
        "cxx_flags": cxx_opt_flags(),
        "march_native": march_native_requested(),
        # Passed explicitly as -D_GLIBCXX_USE_CXX11_ABI (env/build/config.py).
        "cxx11_abi": int(torch._C._GLIBCXX_USE_CXX11_ABI),
        # Pinned in environment.lock.yml; every CUDA build uses it (env/build/config.py).
        "torch_cuda_arch_list": pinned_cuda_arch_list(),
        "torch_cuda_kernels": with_cuda,
        "torch_cuda_kernels_reason": cuda_reason,
    }


def build(mode: str = "jit") -> BuildResult:
    """Build the torch op library (``mode`` jit or aot) and record how."""
    if mode not in ("jit", "aot"):
        raise ValueError(f"mode must be 'jit' or 'aot', got {mode!r}")
    build_dir().mkdir(parents=True, exist_ok=True)
    record = toolchain.collect(_settings(mode))
    record["artifacts"], record["timings_s"] = {}, {}
    toolchain.write_record(record)
    print(toolchain.format_summary(record), flush=True)

    spec = torch_extension_spec()
    start = time.perf_counter()
    library = build_jit(spec) if mode == "jit" else build_aot()
    record["timings_s"][f"torch_{mode}"] = round(time.perf_counter() - start, 1)
    record["artifacts"]["torch_library"] = str(library)
    toolchain.write_record(record)
    print(f"torch op library ({mode}, {record['timings_s'][f'torch_{mode}']} s): {library}", flush=True)

    # The ONNX Runtime custom-op library, from the same kernel core.
    try:
        ort_library = build_ort_library(record)
    finally:
        toolchain.write_record(record)  # headers and CUDA choice are worth keeping even if compiling failed
    print(f"ONNX Runtime custom-op library ({record['timings_s']['ort_library']} s; "
          f"{record['build']['ort_headers']['summary']}): {ort_library}", flush=True)

    # The CUDA compile check: every pinned arch, ptxas resource report.
    try:
        cuda_compile_check(record)
    finally:
        toolchain.write_record(record)

    print(f"toolchain record: {toolchain_record_path()}", flush=True)
    return BuildResult(record=record, record_path=toolchain_record_path())
