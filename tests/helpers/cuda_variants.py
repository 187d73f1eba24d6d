"""The CUDA kernel variants, as the launch plan defines them (csrc/core/fused_norm_cuda_plan.h).

Read through tests/helpers/cuda_plan_probe.cpp, compiled with the host C++ compiler,
so the compile test (every variant in the ptxas report) and the GPU test
(every variant launched) check against the same table the kernels use.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from torch.autograd import DeviceType

from env.builder.ptxas import short_kernel_name
from env.builder.toolchain import cxx_compiler
from env.paths import REPO_ROOT, csrc_dir

# Element type -> (name in the demangled kernel names, bytes).
KERNEL_TYPES = {"float32": ("float", 4), "float64": ("double", 8), "float16": ("Half", 2), "bfloat16": ("BFloat16", 2)}


def build_probe(directory: Path) -> Path:
    exe = directory / "cuda_plan_probe"
    source = REPO_ROOT / "tests" / "helpers" / "cuda_plan_probe.cpp"
    subprocess.run([cxx_compiler(), "-std=c++17", "-O1", f"-I{csrc_dir()}", str(source), "-o", str(exe)], check=True)
    return exe


def read_variants(probe: Path) -> dict:
    """{"warp_rows_kernel": [1, 2, 4], "block_rows_kernel": [4], "streaming_rows_kernel": [None], ...}"""
    return json.loads(subprocess.run([str(probe), "--variants"], capture_output=True, text=True, check=True).stdout)


def plans(probe: Path, cases: list[tuple[int, int, int, int]]) -> list[dict]:
    """make_plan() for each (rows, hidden, elem_bytes, alignment) case (alignment: a power of two <= 16)."""
    text = "".join(f"{r} {h} {b} {a}\n" for r, h, b, a in cases)
    out = subprocess.run([str(probe)], input=text, capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def kernel_names(variants: dict, dtype: str, prefix: str = "") -> set[str]:
    """Short names (as env.builder.ptxas.short_kernel_name writes them) of every variant for ``dtype``; with
    ``prefix`` "add_", the residual add + norm's kernels of the same families."""
    type_name, size = KERNEL_TYPES[dtype]
    names = set()
    for family, chunk_list in variants.items():
        if not family.endswith("_kernel"):
            continue
        kernel = prefix + family
        vectors = {width // size for width in variants["vector_widths"] if width >= size} | {1}
        for vec in sorted(vectors):
            for chunks in chunk_list:
                args = [type_name, str(vec)] + ([str(chunks)] if chunks is not None else [])
                names.add(f"{kernel}<{', '.join(args)}>")
    return names


def launched_kernels(prof, prefix: str = "") -> set[str]:
    """Short names of the ``rows_kernel`` launches a torch profiler recorded (``prefix`` "add_": the add's).

    Skips, saying why, where the profiler recorded no GPU activity at all: under compute-sanitizer, which
    holds CUPTI, the profiler's kernel records are missing; the kernels still ran (and were checked by the
    sanitizer), and the plain GPU run asserts which ones.
    """
    events = list(prof.events())
    if not any(e.device_type == DeviceType.CUDA for e in events):
        pytest.skip("the profiler recorded no GPU activity (CUPTI is taken, e.g. by compute-sanitizer)")
    names = {short_kernel_name(e.name) for e in events if "rows_kernel" in e.name}
    return {n for n in names if n.startswith(prefix)}
