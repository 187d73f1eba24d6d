"""What gets compiled, and with which flags: the one place JIT, AOT (setup.py),
the ONNX Runtime library and the CUDA compile check read their settings from.
"""

from __future__ import annotations

import os
import platform
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from env.builder.cpu_level import LEVEL_NAMES, loader_level
from env.builder.cxx_runtime import SHARED_CXX_RUNTIME_FLAGS
from env.builder.toolkit import NOT_FOUND, find_cuda_toolkit
from env.paths import REPO_ROOT, csrc_dir

TORCH_EXTENSION_NAME = "fused_norm_torch"

# torch 2.13's headers are C++20 (torch reports "C++ Version: 202002" and
# torch.utils.cpp_extension itself passes -std=c++20); compiling them as C++17
# only "works" with -Wc++20-extensions warnings and risks ODR mismatches, so the
# torch adapter is C++20. The kernel core, the ORT library (whose official
# headers target C++17) and the CUDA objects are plain C++17.
CXX_STANDARD_TORCH = "c++20"
CXX_STANDARD_PORTABLE = "c++17"

# -O3 everywhere. Never -ffast-math: it would change rounding and NaN
# propagation of the reduction. -ffp-contract=off: GCC would otherwise fuse
# x * r * w + b into an FMA in the AVX2/AVX-512 clones but not in the baseline
# one, and differently per loop, so results would depend on the CPU and the
# row split (1 ulp in float16); without contraction every clone, every path
# and both adapters (torch, ORT) give bit-identical results. No -march=native
# in delivered builds: the CPU kernel carries AVX-512/AVX2/baseline clones and
# picks one at load time. FUSEDBENCH_MARCH_NATIVE=1 opts in for a local build.
OPT_FLAGS = ["-O3", "-ffp-contract=off"]


def march_native_requested() -> bool:
    return os.environ.get("FUSEDBENCH_MARCH_NATIVE", "0") == "1"


# Which of the kernel core's versions a build compiles: "all" (delivered builds, `invoke build`) or "loader", the one
# version the loader would run on this CPU (env/builder/cpu_level.py), compiled with that version's own target
# attribute and called directly. The three versions are two thirds of a cold build's compile time, and a benchmark
# times only the one its CPU runs, so a benchmark's build compiles that one alone. The variable, where set, decides
# for every build; an A/B run passes it to the build of its base, so both sides are built alike.
CORE_VERSIONS_VARIABLE = "FUSEDBENCH_CORE_VERSIONS"
CORE_VERSIONS = ("all", "loader")
_core_versions_override: str | None = None  # a benchmark's build, while it runs (core_versions_for)


def _checked_core_versions(value: str) -> str:
    if value not in CORE_VERSIONS:
        raise ValueError(f"{CORE_VERSIONS_VARIABLE} must be one of {', '.join(CORE_VERSIONS)}, got {value!r}")
    return value


def core_versions() -> str:
    """The versions the build running now compiles: $FUSEDBENCH_CORE_VERSIONS, else the build's own choice."""
    explicit = os.environ.get(CORE_VERSIONS_VARIABLE, "").strip()
    if explicit:
        return _checked_core_versions(explicit)
    return _core_versions_override or "all"


def benchmark_core_versions() -> str:
    """What a benchmark's build compiles: $FUSEDBENCH_CORE_VERSIONS where set, else the loader's version alone."""
    explicit = os.environ.get(CORE_VERSIONS_VARIABLE, "").strip()
    return _checked_core_versions(explicit) if explicit else "loader"


@contextmanager
def core_versions_for(value: str) -> Iterator[None]:
    """Builds inside compile ``value`` unless $FUSEDBENCH_CORE_VERSIONS says otherwise (a benchmark's build)."""
    global _core_versions_override
    before, _core_versions_override = _core_versions_override, _checked_core_versions(value)
    try:
        yield
    finally:
        _core_versions_override = before


def core_level_defines() -> list[str]:
    """The kernel core's define for the versions asked: none for all of them (or off x86-64, where it has none)."""
    if core_versions() == "all":
        return []
    level = loader_level()
    return [] if level is None else [f"-DFUSED_NORM_CPU_LEVEL={level}"]


def core_versions_label() -> str:
    """The kernel core's versions in the build running now, as the toolchain record and the build's lines say it."""
    if platform.machine() != "x86_64":
        return "one (the core has no versions off x86-64)"
    if core_versions() == "all":
        return "all three (the loader picks one per CPU)"
    return f"{LEVEL_NAMES[loader_level()]} alone (the version the loader runs on this CPU)"


def cxx_opt_flags() -> list[str]:
    return OPT_FLAGS + (["-march=native"] if march_native_requested() else []) + core_level_defines()


# A deliberate slowdown of the torch op's CPU entry points (csrc/torch/slowdown.h), in whole percent of
# each call's period: how the comparisons' detection rates are measured (the experiments build their slowed
# trees with it). 0 or unset: no slowdown, no code.
SLOWDOWN_VARIABLE = "FUSEDBENCH_SLOWDOWN_PERCENT"
MAX_SLOWDOWN_PERCENT = 1000  # the header's static_assert bound


def slowdown_percent() -> int:
    """$FUSEDBENCH_SLOWDOWN_PERCENT as an integer percent (0 when unset); ValueError naming it otherwise."""
    text = os.environ.get(SLOWDOWN_VARIABLE, "").strip() or "0"
    if not text.isdigit() or int(text) > MAX_SLOWDOWN_PERCENT:
        raise ValueError(
            f"{SLOWDOWN_VARIABLE} must be an integer percent in 0..{MAX_SLOWDOWN_PERCENT} (like 10), got {text!r}"
        )
    return int(text)


# A calibration's table of per-row percents (bench/experiments/slowdown_calibration.py): a CSV with columns
# shape (like 1x8x512), dtype (float32, ...), variant (call, out, or empty for both; the column may be absent)
# and percent. With the switch on, the build gets it as a generated header; without the switch it is ignored
# (no slowdown, no code).
SLOWDOWN_TABLE_VARIABLE = "FUSEDBENCH_SLOWDOWN_TABLE"
SLOWDOWN_TABLE_HEADER = "fused_norm_slowdown_table.h"
# c10::ScalarType's values (stable: they are serialised by torch) of the dtypes the op takes.
SCALAR_TYPE_VALUES = {"float16": 5, "float32": 6, "float64": 7, "bfloat16": 15}
# A table's variant -> the header's SlowdownEntry (the op's allocating call, its out variant, either).
SLOWDOWN_ENTRIES = {"": "kAnyEntry", "call": "kCall", "out": "kOut"}


def slowdown_table_rows(path: Path) -> list[tuple[int, int, int, str, float]]:
    """The table's rows as (rows, width, dtype value, variant, percent); ValueError naming the file and line
    otherwise."""
    import csv

    found = []
    with open(path, newline="") as handle:
        for number, line in enumerate(csv.DictReader(handle), start=2):
            try:
                sizes = [int(n) for n in line["shape"].split("x")]
                dtype, percent = SCALAR_TYPE_VALUES[line["dtype"]], float(line["percent"])
                variant = (line.get("variant") or "").strip()
                if variant not in SLOWDOWN_ENTRIES:
                    raise KeyError(variant)
            except (KeyError, ValueError, TypeError, AttributeError):
                raise ValueError(
                    f"{path}:{number}: needs shape (like 1x8x512), dtype, percent and a variant of "
                    f"call, out or empty: {line}"
                ) from None
            if not 0 <= percent <= MAX_SLOWDOWN_PERCENT or min(sizes) < 1:
                raise ValueError(f"{path}:{number}: a percent in 0..{MAX_SLOWDOWN_PERCENT} and sizes >= 1, got {line}")
            rows = 1
            for size in sizes[:-1]:
                rows *= size
            found.append((rows, sizes[-1], dtype, variant, percent))
    return found


def slowdown_table_header(rows: list[tuple[int, int, int, str, float]]) -> str:
    entries = "".join(
        f"    {{{r}, {w}, {d}, SlowdownEntry::{SLOWDOWN_ENTRIES[v]}, {p!r}}},\n" for r, w, d, v, p in rows
    )
    return (
        "// Generated by env/builder/config.py from a slowdown calibration's table: do not edit.\n#pragma once\n"
        "namespace fused_norm {\n"
        f"constexpr SlowdownRow kSlowdownTable[] = {{\n{entries}}};\n"
        "}  // namespace fused_norm\n"
    )


def slowdown_defines(out_dir: Path | None = None) -> list[str]:
    """The compile definitions of the requested slowdown (none when it is 0), and with a table the include
    folder of its generated header (written under ``out_dir``, default the build folder)."""
    percent = slowdown_percent()
    if not percent:
        return []
    defines = [f"-DFUSED_NORM_SLOWDOWN_PERCENT={percent}"]
    table = os.environ.get(SLOWDOWN_TABLE_VARIABLE, "").strip()
    if table:
        import hashlib

        from env.paths import build_dir

        rows = slowdown_table_rows(Path(table))
        if not rows:
            raise ValueError(f"{SLOWDOWN_TABLE_VARIABLE} names {table}, which has no row")
        text = slowdown_table_header(rows)
        folder = (out_dir or build_dir()) / "slowdown"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / SLOWDOWN_TABLE_HEADER).write_text(text)
        # The table's hash in the define: another table is another set of flags, so the build is redone.
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        defines += [f"-DFUSED_NORM_SLOWDOWN_TABLE=0x{digest}", f"-I{folder}"]
    return defines


# The CUDA architectures of every CUDA build are pinned in ONE place,
# environment.lock.yml `variables: TORCH_CUDA_ARCH_LIST`, never guessed from
# the visible GPU (cpp_extension's default), so a build on a machine with an
# A100 still runs on an H200 and the other way round.
CUDA_ARCH_LIST_VARIABLE = "TORCH_CUDA_ARCH_LIST"


def pinned_cuda_arch_list() -> str:
    """TORCH_CUDA_ARCH_LIST as pinned in environment.lock.yml (e.g. "8.0;9.0+PTX")."""
    from env.lock.lockfile import LockError, read_lock

    lock = read_lock()
    value = lock.variables.get(CUDA_ARCH_LIST_VARIABLE, "").strip()
    if not value:
        raise LockError(f"{lock.path}: `variables: {CUDA_ARCH_LIST_VARIABLE}` is missing; every CUDA build needs it")
    return value


def use_pinned_cuda_arch_list() -> str:
    """Put the pinned arch list into os.environ, where cpp_extension (JIT and setup.py)
    reads it; warn when the caller's environment asked for something else."""
    pinned = pinned_cuda_arch_list()
    current = os.environ.get(CUDA_ARCH_LIST_VARIABLE)
    if current is not None and current.strip() != pinned:
        warnings.warn(
            f"{CUDA_ARCH_LIST_VARIABLE}={current!r} in the environment is ignored: CUDA builds use the value "
            f"pinned in environment.lock.yml ({pinned!r}); change it there to build for other GPUs",
            stacklevel=2,
        )
    os.environ[CUDA_ARCH_LIST_VARIABLE] = pinned
    return pinned


def _rel(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(REPO_ROOT)) for p in paths]


def core_cpu_sources() -> list[Path]:
    return [csrc_dir() / "core" / "fused_norm_cpu.cpp"]


def platform_cpu_sources() -> list[Path]:
    """What the adapters ask the machine (the cache sizes the CPU core is given)."""
    return [csrc_dir() / "platform" / "cpu_caches.cpp"]


def core_cuda_sources() -> list[Path]:
    return [csrc_dir() / "core" / "fused_norm_cuda.cu"]


@dataclass(frozen=True)
class TorchExtensionSpec:
    """Sources and flags of the torch op library (JIT and AOT alike)."""

    sources: list[Path]
    include_dirs: list[Path]
    cxx_flags: list[str]
    ld_flags: list[str] = field(default_factory=list)
    nvcc_flags: list[str] = field(default_factory=list)
    with_cuda: bool = False

    def relative_sources(self) -> list[str]:
        return _rel(self.sources)


def cuda_build_possible() -> tuple[bool, str]:
    """Whether the torch extension can include its CUDA kernels, and why not."""
    import torch

    if torch.version.cuda is None:
        return False, f"torch {torch.__version__} is a CPU-only build (no CUDA libraries to link)"
    if find_cuda_toolkit() is None:
        return False, NOT_FOUND
    cuda_sources = [p for p in core_cuda_sources() + [csrc_dir() / "torch" / "torch_cuda_impl.cpp"] if p.exists()]
    if len(cuda_sources) < 2:
        return False, "the CUDA sources are not present in csrc/"
    return True, f"torch {torch.__version__} with CUDA {torch.version.cuda}"


def torch_sources(with_cuda: bool) -> list[Path]:
    """The torch op library's sources (with the CUDA kernels and their adapter when ``with_cuda``)."""
    torch_dir = csrc_dir() / "torch"
    sources = (
        core_cpu_sources()
        + platform_cpu_sources()
        + [
            torch_dir / "torch_schema.cpp",
            torch_dir / "torch_adapter.cpp",
            torch_dir / "torch_cpu_impl.cpp",
            torch_dir / "torch_autograd.cpp",
        ]
    )
    if with_cuda:
        sources += core_cuda_sources() + [torch_dir / "torch_cuda_impl.cpp"]
    return sources


# -fopenmp: at::parallel_for is inline and only splits work when the caller is
# compiled with OpenMP; without it the op silently runs on one thread. The
# resulting libgomp.so.1 dependency resolves to the copy torch already loaded
# (same soname), so there is one OpenMP runtime and torch.set_num_threads
# governs the op. -lstdc++: the same for the C++ runtime (env/builder/cxx_runtime.py).
TORCH_LD_FLAGS = ("-fopenmp", *SHARED_CXX_RUNTIME_FLAGS)


def torch_cxx_flags() -> list[str]:
    """The torch adapter's C++ flags, less the defines that come from torch itself."""
    return [f"-std={CXX_STANDARD_TORCH}", *cxx_opt_flags(), "-fopenmp", *slowdown_defines()]


def torch_nvcc_flags() -> list[str]:
    """The torch extension's nvcc flags, less the defines that come from torch itself."""
    return [f"-std={CXX_STANDARD_PORTABLE}", "-O3", "--ptxas-options=-v"]


def torch_extension_spec(with_cuda: bool | None = None) -> TorchExtensionSpec:
    if with_cuda is None:
        with_cuda, _ = cuda_build_possible()
    import torch

    # torch 2.13's cpp_extension does not pass the libstdc++ ABI flag; pass
    # torch's own value explicitly so a compiler with another default can't
    # produce a library that fails with "undefined symbol" at load time.
    defines = [f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
    if with_cuda:
        defines.append("-DFUSED_NORM_WITH_CUDA")
        use_pinned_cuda_arch_list()  # JIT and setup.py both build from this spec
    return TorchExtensionSpec(
        sources=torch_sources(with_cuda),
        include_dirs=[csrc_dir()],
        cxx_flags=[*torch_cxx_flags(), *defines],
        ld_flags=list(TORCH_LD_FLAGS),
        nvcc_flags=[*torch_nvcc_flags(), *defines] if with_cuda else [],
        with_cuda=with_cuda,
    )
