"""The toolchain record: what a build was compiled with, and what differs now.

``invoke build`` calls :func:`collect` before compiling and stores the result
as ``build/toolchain.json`` (see :mod:`env.builder`). ``import ops`` reads it
when the built library does not load (ops/_diagnosis.py), so that an
"undefined symbol" after an upgrade becomes "torch 2.13.0 -> 2.14.1: rebuild".
Fields that ``torch.utils.collect_env`` already knows come from it.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from env.builder.cxx_runtime import compiler_default_runtime
from env.builder.toolkit import find_cuda_toolkit
from env.files import write_text_atomic
from env.paths import toolchain_record_path


def _run_first_line(cmd: list[str]) -> str | None:
    """First output line of ``cmd``, or None if the tool is missing or fails."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else None


def cxx_compiler() -> str:
    """The C++ compiler torch.utils.cpp_extension will use ($CXX or c++)."""
    return os.environ.get("CXX", "c++")


def compiler_default_abi(compiler: str) -> int | None:
    """Value of _GLIBCXX_USE_CXX11_ABI that ``compiler`` uses without flags."""
    if shutil.which(compiler) is None:
        return None
    probe = subprocess.run(
        [compiler, "-x", "c++", "-std=c++17", "-dM", "-E", "-include", "string", "-"],
        input="",
        capture_output=True,
        text=True,
        check=False,
    )
    match = re.search(r"#define _GLIBCXX_USE_CXX11_ABI (\d)", probe.stdout)
    return int(match.group(1)) if match else None


def _torch_config_field(config: str, label: str) -> str | None:
    match = re.search(rf"{re.escape(label)}:?\s*(.+)", config)
    return match.group(1).strip() if match else None


def _cpu_info() -> tuple[str | None, list[str]]:
    model, flags = platform.processor() or None, []
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        text = cpuinfo.read_text(errors="replace")
        if m := re.search(r"^model name\s*:\s*(.+)$", text, re.M):
            model = m.group(1).strip()
        if m := re.search(r"^flags\s*:\s*(.+)$", text, re.M):
            flags = m.group(1).split()
    return model, flags


def cpu_flags() -> set[str]:
    """The CPU's feature flags as /proc/cpuinfo lists them (empty where it does not exist)."""
    return set(_cpu_info()[1])


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what platform knows."""
    return _cpu_info()[0] or platform.machine()


def _cpu_facts() -> dict[str, Any]:
    model, flags = _cpu_info()
    # Only the flags that decide which kernel clone runs.
    relevant = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "amx_tile")
    return {
        "model": model,
        "logical_cores": os.cpu_count(),
        "flags": [f for f in relevant if f in flags],
    }


def runtime_facts() -> dict[str, Any]:
    """Facts about the running interpreter that a built library depends on (cheap)."""
    import torch

    config = torch.__config__.show()
    return {
        "torch": {
            "version": torch.__version__,
            "git_version": torch.version.git_version,
            "cuda": torch.version.cuda,
            "cxx11_abi": int(torch._C._GLIBCXX_USE_CXX11_ABI),
            "built_with_compiler": _torch_config_field(config, "- GCC") or _torch_config_field(config, "- clang"),
            "built_with_cxx_standard": _torch_config_field(config, "C++ Version"),
        },
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "compiler": {"path": shutil.which(cxx_compiler()), "version": _run_first_line([cxx_compiler(), "--version"])},
    }


def quick_facts() -> dict[str, Any]:
    """The toolchain facts a build depends on, found without importing torch (milliseconds).

    They key both the build steps and the cache of the full record
    (:func:`collect_cached`): torch is identified by its installed
    ``version.py`` (version, git commit, CUDA), not by importing it.
    """
    from env.builder.config import pinned_cuda_arch_list

    compiler = cxx_compiler()
    compiler_path = shutil.which(compiler)
    toolkit = find_cuda_toolkit()
    return {
        # Not the executable's path: `invoke`, `python -m invoke` and a symlinked
        # environment name the same interpreter differently.
        "python": {"version": platform.python_version(), "build": sys.version},
        "compiler": {
            "command": compiler,
            "path": compiler_path,
            "resolved": str(Path(compiler_path).resolve()) if compiler_path else None,
            "version": _run_first_line([compiler, "--version"]),
        },
        "torch": _torch_install(),
        "nvcc": {"path": str(toolkit.nvcc) if toolkit else None, "version": toolkit.version if toolkit else None},
        "cuda_arch_list": pinned_cuda_arch_list(),  # every CUDA build's targets
        "cuda_home": os.environ.get("CUDA_HOME"),
        "onnxruntime": package_version("onnxruntime"),
    }


def _torch_install() -> dict[str, Any]:
    """torch's version and the hash of its ``version.py`` (version, git commit, CUDA), without importing it."""
    import hashlib
    from importlib.util import find_spec

    spec = find_spec("torch")
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        return {"version": None}
    version_py = Path(locations[0]) / "version.py"
    text = version_py.read_text() if version_py.is_file() else ""
    cuda = re.search(r"^cuda\b[^=\n]*=\s*'([^']*)'", text, re.M)  # "cuda: Optional[str] = '13.0'" or None
    return {
        "version": package_version("torch"),
        "location": str(Path(locations[0]).resolve()),
        "cuda": cuda.group(1) if cuda else None,
        "version_py_sha256": hashlib.sha256(text.encode()).hexdigest(),
    }


def quick_summary(facts: dict[str, Any]) -> str:
    """One line naming the toolchain, for a normal ``invoke build``."""
    compiler = facts["compiler"]["version"] or f"{facts['compiler']['command']} (not found)"
    nvcc = facts["nvcc"]["version"] or "none"
    return (
        f"toolchain: {compiler}; torch {facts['torch'].get('version')}; Python {facts['python']['version']}; "
        f"nvcc {nvcc}; onnxruntime {facts['onnxruntime']}"
    )


def collect_cached(key: str, build_settings: Callable[[], dict[str, Any]], cache_path: Path) -> dict[str, Any]:
    """:func:`collect` for these settings, reused while ``key`` (the facts it depends on) is unchanged.

    Collecting imports torch and runs ``torch.utils.collect_env`` (seconds);
    a build with an unchanged toolchain reads the cached record instead.
    """
    if cache_path.is_file():
        try:
            cached = json.loads(cache_path.read_text())
        except ValueError:
            cached = {}
        if cached.get("key") == key and isinstance(cached.get("record"), dict):
            return cached["record"]
    record = collect(build_settings())
    write_text_atomic(cache_path, json.dumps({"key": key, "record": record}, indent=2, sort_keys=True) + "\n")
    return record


def collect(build_settings: dict[str, Any]) -> dict[str, Any]:
    """Full toolchain record for a build with ``build_settings`` (flags, standards, arch list)."""
    from torch.utils import collect_env

    info = collect_env.get_env_info()
    facts = runtime_facts()
    compiler = cxx_compiler()
    facts["compiler"]["default_cxx11_abi"] = compiler_default_abi(compiler)
    # What the build's -lstdc++ overrides where it differs (env/builder/cxx_runtime.py).
    facts["compiler"]["default_cxx_runtime"] = compiler_default_runtime(compiler)
    facts["cuda"] = {
        "nvcc": toolkit.version if (toolkit := find_cuda_toolkit()) else None,
        "torch_cuda_arch_list": os.environ.get("TORCH_CUDA_ARCH_LIST"),
        "torch_cuda_available": info.is_cuda_available == "True",
        "gpu_models": info.nvidia_gpu_models,
        "driver": info.nvidia_driver_version,
    }
    facts["onnx"] = _package_versions(["onnxruntime", "onnx", "onnxscript"])
    facts["os"] = {"name": info.os, "libc": info.libc_version, "platform": info.python_platform}
    facts["cpu"] = _cpu_facts()
    facts["build"] = build_settings
    return facts


def package_version(name: str) -> str | None:
    """Installed version of ``name``; onnxruntime may be installed as onnxruntime-gpu."""
    from importlib import metadata

    for dist in (name, f"{name}-gpu") if name == "onnxruntime" else (name,):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _package_versions(names: list[str]) -> dict[str, str | None]:
    return {name: package_version(name) for name in names}


def _get(record: dict[str, Any], dotted: str) -> Any:
    node: Any = record
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def read_record(path: Path | None = None) -> dict[str, Any]:
    return json.loads((path or toolchain_record_path()).read_text())


def write_record(record: dict[str, Any], path: Path | None = None) -> Path:
    return write_text_atomic(path or toolchain_record_path(), json.dumps(record, indent=2, sort_keys=True) + "\n")


def summary_rows(record: dict[str, Any]) -> list[tuple[str, str]]:
    """The short table ``invoke build`` prints: (fact, value)."""
    build = record.get("build", {})
    standards = build.get("cxx_standard", {})
    rows = [
        ("compiler", f"{_get(record, 'compiler.version')} [{_get(record, 'compiler.path')}]"),
        ("C++ standard", ", ".join(f"{k}: {v}" for k, v in standards.items())),
        (
            "ABI flag (torch / build / compiler default)",
            f"{_get(record, 'torch.cxx11_abi')} / {build.get('cxx11_abi')} / "
            f"{_get(record, 'compiler.default_cxx11_abi')}",
        ),
        (
            "libstdc++ (torch library / ORT library / compiler default)",
            f"{build.get('torch_cxx_runtime')} / {build.get('ort_cxx_runtime')} / "
            f"{_get(record, 'compiler.default_cxx_runtime')}",
        ),
        (
            "torch",
            f"{_get(record, 'torch.version')} (git {str(_get(record, 'torch.git_version'))[:10]}, "
            f"built with {_get(record, 'torch.built_with_compiler')}, "
            f"C++ {_get(record, 'torch.built_with_cxx_standard')})",
        ),
        ("torch CUDA", str(_get(record, "torch.cuda"))),
        ("nvcc", str(_get(record, "cuda.nvcc"))),
        ("TORCH_CUDA_ARCH_LIST", str(build.get("torch_cuda_arch_list") or _get(record, "cuda.torch_cuda_arch_list"))),
        (
            "onnxruntime / onnx / onnxscript",
            " / ".join(str(_get(record, f"onnx.{k}")) for k in ("onnxruntime", "onnx", "onnxscript")),
        ),
        (
            "ORT headers",
            (build.get("ort_headers") or {}).get("summary")
            or "resolved by the ONNX Runtime library step (see `invoke toolchain` after the build)",
        ),
        ("Python", str(_get(record, "python.version"))),
        ("OS / libc", f"{_get(record, 'os.name')} / {_get(record, 'os.libc')}"),
        (
            "CPU",
            f"{_get(record, 'cpu.model')} ({_get(record, 'cpu.logical_cores')} logical cores; "
            f"{' '.join(_get(record, 'cpu.flags') or [])})",
        ),
        ("optimisation flags", " ".join(build.get("cxx_flags", []))),
    ]
    return rows


def format_summary(record: dict[str, Any]) -> str:
    rows = summary_rows(record)
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
