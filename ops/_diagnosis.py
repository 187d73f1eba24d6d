"""Why a built library does not load: the toolchain facts that changed since it was built.

``import ops`` calls :func:`explain_load_failure` when the library fails to
load, so that an "undefined symbol" after an upgrade reads "torch 2.13.0 ->
2.14.1: rebuild". The record is the JSON the build wrote (build/toolchain.json,
or ops/toolchain.json inside an installed wheel).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

# Facts that decide whether a built library can load into the running process:
# (dotted key in the record, what to say about it).
LOAD_CRITICAL_FACTS = (
    ("torch.version", "torch version"),
    ("torch.git_version", "torch build (git commit)"),
    ("torch.cxx11_abi", "torch's _GLIBCXX_USE_CXX11_ABI"),
    ("torch.cuda", "torch's CUDA version"),
    ("python.version", "Python version"),
    ("compiler.version", "C++ compiler"),
)


def _compiler_version() -> str | None:
    compiler = os.environ.get("CXX", "c++")  # the compiler torch.utils.cpp_extension uses
    if shutil.which(compiler) is None:
        return None
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else None


def running_facts() -> dict[str, Any]:
    """The load-critical facts of this process, keyed like the build's record."""
    import torch

    return {
        "torch": {
            "version": torch.__version__,
            "git_version": torch.version.git_version,
            "cuda": torch.version.cuda,
            "cxx11_abi": int(torch._C._GLIBCXX_USE_CXX11_ABI),
        },
        "python": {"version": platform.python_version()},
        "compiler": {"version": _compiler_version()},
    }


def _get(record: dict[str, Any], dotted: str) -> Any:
    node: Any = record
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """One line for each load-critical fact that changed since the build (absent facts are not compared)."""
    lines = []
    for key, label in LOAD_CRITICAL_FACTS:
        before, now = _get(recorded, key), _get(current, key)
        if before is not None and before != now:
            lines.append(f"{label}: built with {before!r}, running {now!r}")
    return lines


def explain_load_failure(library: Path, error: BaseException, record_path: Path) -> str:
    """Message for a library that failed to load: the differing facts and how to get a matching one."""
    head = f"could not load {library}: {error}"
    rebuild = (
        "Rebuild it for this environment: `invoke build` (or `invoke build --aot`), "
        "or install the wheel built for this torch."
    )
    if not record_path.exists():
        return f"{head}\nNo toolchain record at {record_path}, so the cause cannot be narrowed down. {rebuild}"
    diffs = differences(json.loads(record_path.read_text()), running_facts())
    if not diffs:
        return (
            f"{head}\nThe toolchain recorded in {record_path} matches the running one "
            f"(torch, ABI flag, compiler, Python), so the library itself is broken or stale. {rebuild}"
        )
    listed = "\n".join(f"  - {d}" for d in diffs)
    return f"{head}\nThe library was built with a different toolchain ({record_path}):\n{listed}\n{rebuild}"
