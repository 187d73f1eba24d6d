"""Build the CUDA kernels for the CPU: csrc/core/fused_norm_cuda.cu compiled by
the host C++ compiler with the SIMT emulator (csrc/emu/simt.h) force-included.

Two products:
  * a shared library exporting ``fused_norm_emulated_forward`` and the
    emulator's test controls (``simt_*``), loaded with ctypes by the tests.
    Its kernel translation unit carries the compiler's ThreadSanitizer
    instrumentation (-fsanitize=thread, without the ThreadSanitizer runtime):
    every memory access of the kernels calls the emulator's race detector
    (csrc/emu/race_detector.h), which does nothing until a test turns it on;
  * with ``sanitize=True``, an executable (csrc/emu/asan_probe.cpp) built
    with AddressSanitizer and UndefinedBehaviorSanitizer, which runs the
    kernels on exactly-sized heap buffers, so that any access past a row's
    end is reported.

The kernel source can be any file (the fault-injection tests pass an edited
copy); its includes resolve against csrc/core. Every object is cached under
build/cuda_emulated/ by a hash of its inputs and flags, so the faulted
variants reuse the runtime objects and a rerun compiles nothing. No GPU and
no nvcc are needed, only CUDA's headers (cuda_fp16.h, cuda_bf16.h,
cuda_runtime.h), found where the CUDA compile check finds them.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from env.builder.commands import BuildError, run_logged
from env.builder.config import core_cuda_sources
from env.builder.toolchain import cxx_compiler
from env.builder.toolkit import cuda_include_dir as _cuda_include_dir
from env.files import atomic_path
from env.paths import build_dir, csrc_dir

LIBRARY_NAME = "libfused_norm_emulated.so"
PROBE_NAME = "fused_norm_asan_probe"

# -O1: the kernels' logic is what is tested, and -O1 compiles the 40 variants
# in about a second of CPU (-O2 takes 60% longer, for a run time that is
# dominated by fiber switches anyway). The sanitizer build keeps line tables
# (-g1) so that a report names the kernel's source line. No -ffast-math (it would change rounding); FMA contraction
# off like the CPU build, so differences to nvcc's fused multiply-adds stay
# within the tolerances rather than depending on the host's vector unit.
# -fno-gnu-unique: several builds of the same kernels (the faulted variants)
# are loaded into one process and must not share their static variables.
COMMON_FLAGS = [
    "-std=c++17",
    "-fPIC",
    "-ffp-contract=off",
    "-fno-gnu-unique",
    "-Wall",
    "-Wno-unknown-pragmas",
    "-Wno-maybe-uninitialized",
]
RELEASE_FLAGS = ["-O1"]
# The kernels' translation unit in the release build: every memory access
# calls a hook (csrc/emu/simt.cpp), and the line tables let a race report
# name the source lines.
KERNEL_RACE_FLAGS = ["-fsanitize=thread", "-g1"]
SANITIZER_FLAGS = ["-O1", "-g1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]


class EmulationBuildError(BuildError):
    """The emulated kernels could not be built; the message says why."""


def emu_dir() -> Path:
    return csrc_dir() / "emu"


def cache_dir() -> Path:
    return build_dir() / "cuda_emulated"


def cuda_headers() -> Path:
    """Folder of cuda_runtime_api.h; raises EmulationBuildError when there is none."""
    include = _cuda_include_dir()
    if include is None or not (include / "cuda_fp16.h").is_file():
        raise EmulationBuildError(
            "CUDA headers (cuda_runtime_api.h, cuda_fp16.h) not found in $CUDA_HOME/include, beside nvcc or in "
            "/usr/local/cuda/include - install the CUDA toolkit (nvcc) to run the kernels in the emulator"
        )
    return include


def _digest(parts: list[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()[:20]


@functools.cache
def _compiler_identity(compiler: str) -> bytes:
    out = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False)
    return (out.stdout.splitlines() or [compiler])[0].encode()


def _headers() -> list[Path]:
    """Every header a translation unit here can include from the project."""
    return sorted((csrc_dir() / "core").glob("*.h")) + sorted(emu_dir().glob("*.h"))


def _compile(compiler: str, source: Path, flags: list[str], kind: str) -> Path:
    """Compile ``source`` to a cached object; return its path."""
    key = _digest(
        [_compiler_identity(compiler), " ".join(flags).encode(), source.read_bytes()]
        + [p.name.encode() + p.read_bytes() for p in _headers()]
    )
    obj = cache_dir() / "objects" / f"{kind}-{key}.o"
    if obj.is_file():
        return obj
    log = cache_dir() / "logs" / f"{kind}-{key}.log"
    with atomic_path(obj) as tmp:
        run_logged([compiler, *flags, "-c", str(source), "-o", str(tmp)], log)
    return obj


def _link(compiler: str, objects: list[Path], flags: list[str], name: str) -> Path:
    key = _digest([" ".join(flags).encode()] + [o.name.encode() for o in objects])
    out = cache_dir() / key / name
    if out.is_file():
        return out
    with atomic_path(out) as tmp:
        run_logged([compiler, *flags, *map(str, objects), "-o", str(tmp)], cache_dir() / "logs" / f"link-{key}.log")
        os.chmod(tmp, 0o755)
    return out


def build_emulated_kernels(kernel_source: Path | None = None, sanitize: bool = False, workers: int = 2) -> Path:
    """Build the kernels of ``kernel_source`` (default: csrc/core/fused_norm_cuda.cu) for the emulator.

    Returns the shared library, or with ``sanitize`` the AddressSanitizer probe executable.
    Up to ``workers`` translation units compile at a time.
    """
    compiler = cxx_compiler()
    if shutil.which(compiler) is None:
        raise EmulationBuildError(f"C++ compiler {compiler!r} not found - install g++ or set $CXX")
    source = Path(kernel_source or core_cuda_sources()[0])
    if not source.is_file():
        raise EmulationBuildError(f"kernel source {source} does not exist")
    includes = [f"-I{csrc_dir() / 'core'}", f"-I{emu_dir()}", f"-isystem{cuda_headers()}"]
    flags = COMMON_FLAGS + (SANITIZER_FLAGS if sanitize else RELEASE_FLAGS) + includes
    tag = "asan-" if sanitize else ""
    race_flags = [] if sanitize else KERNEL_RACE_FLAGS  # AddressSanitizer and the race hooks do not mix
    kernel_flags = [*flags, *race_flags, "-include", str(emu_dir() / "simt.h"), "-x", "c++"]
    units = [
        *_runtime_units(flags, tag),
        (emu_dir() / "emulated_norm.cpp", flags, f"{tag}emulated_norm"),
        (source, kernel_flags, f"{tag}kernels"),
    ]
    if sanitize:
        units.append((emu_dir() / "asan_probe.cpp", flags, f"{tag}probe"))
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        objects = list(pool.map(lambda unit: _compile(compiler, *unit), units))
    if sanitize:
        return _link(compiler, objects, SANITIZER_FLAGS, PROBE_NAME)
    # -Bsymbolic: each library calls its own kernels and runtime even when
    # several builds of them are loaded into one process.
    return _link(compiler, objects, ["-shared", "-Wl,-Bsymbolic"], LIBRARY_NAME)


def _runtime_units(flags: list[str], tag: str) -> list[tuple[Path, list[str], str]]:
    """The emulator's runtime: scheduler, collectives and the race detector. The detector runs on every memory
    access of the kernels, so it is optimised further (-O2, the last flag wins) in the release build."""
    detector_flags = flags if tag else [*flags, "-O2"]
    return [
        (emu_dir() / "simt.cpp", detector_flags, f"{tag}simt"),
        (emu_dir() / "race_detector.cpp", detector_flags, f"{tag}races"),
    ]


def build_kernel_library(source: Path, name: str, workers: int = 2) -> Path:
    """A .cu file of kernels with its own C entry points (the emulator's self-test, the race gallery), built with
    the runtime and the race hooks into the shared library ``name``."""
    compiler = cxx_compiler()
    if shutil.which(compiler) is None:
        raise EmulationBuildError(f"C++ compiler {compiler!r} not found - install g++ or set $CXX")
    if not Path(source).is_file():
        raise EmulationBuildError(f"kernel source {source} does not exist")
    flags = COMMON_FLAGS + RELEASE_FLAGS + [f"-I{csrc_dir() / 'core'}", f"-I{emu_dir()}", f"-isystem{cuda_headers()}"]
    units = [
        *_runtime_units(flags, ""),
        (
            Path(source),
            [*flags, *KERNEL_RACE_FLAGS, "-include", str(emu_dir() / "simt.h"), "-x", "c++"],
            f"kernels-{Path(source).stem}",
        ),
    ]
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        objects = list(pool.map(lambda unit: _compile(compiler, *unit), units))
    return _link(compiler, objects, ["-shared", "-Wl,-Bsymbolic"], name)


def build_kernel_libraries(sources: list[Path], workers: int = 2) -> list[Path]:
    """build_kernel_library for several sources (each into lib<stem>.so): the runtime first, then ``workers``
    kernel files at a time."""
    if not sources:
        return []
    first = build_kernel_library(sources[0], f"lib{Path(sources[0]).stem}.so", workers=workers)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        rest = pool.map(lambda s: build_kernel_library(s, f"lib{Path(s).stem}.so", workers=1), sources[1:])
        return [first, *rest]


def build_emulator_selftest() -> Path:
    """The emulator's own test kernel (csrc/emu/simt_selftest.cu) with the runtime, as a shared library."""
    return build_kernel_library(emu_dir() / "simt_selftest.cu", "libsimt_selftest.so")


def build_many(sources: list[Path], sanitize: bool = False, workers: int = 2) -> list[Path]:
    """build_emulated_kernels for several sources, ``workers`` compilers at a time.

    The first is built alone, so that the others find the runtime objects
    cached and only compile their kernels.
    """
    if not sources:
        return []
    first = build_emulated_kernels(sources[0], sanitize=sanitize, workers=workers)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        rest = pool.map(lambda s: build_emulated_kernels(s, sanitize=sanitize, workers=1), sources[1:])
        return [first, *rest]
