"""The environment recorded in every report row: what a reader needs to reproduce or distrust a number."""

from __future__ import annotations

import json
import os
import platform
import re
import socket
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import torch

from env.paths import REPO_ROOT, toolchain_record_path


def git_commit(repo: Path = REPO_ROOT) -> str:
    """HEAD's hash, with ``-dirty`` when tracked files differ from it; "unknown" outside a git checkout."""
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        status = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip() + ("-dirty" if status.stdout.strip() else "")


def _package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    for dist in (name, f"{name}-gpu"):  # onnxruntime may come as onnxruntime-gpu
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return "not installed"


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        match = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(errors="replace"), re.M)
        if match:
            return match.group(1).strip()
    return platform.processor() or platform.machine()


def _toolchain() -> dict:
    path = toolchain_record_path()
    return json.loads(path.read_text()) if path.exists() else {}


def utc_timestamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def environment_columns(threads: int, device: str, timestamp: str) -> dict[str, object]:
    record = _toolchain()
    abi = record.get("build", {}).get("cxx11_abi")
    return {
        "timestamp_utc": timestamp,
        "host": socket.gethostname(),
        "git_commit": git_commit(),
        "torch": torch.__version__,
        "onnxruntime": _package_version("onnxruntime"),
        "onnx": _package_version("onnx"),
        "compiler": record.get("compiler", {}).get("version") or "unknown (no build/toolchain.json)",
        "cxx11_abi": str(abi) if abi is not None else f"unknown (torch: {int(torch.compiled_with_cxx11_abi())})",
        "cpu_model": _cpu_model(),
        "threads": threads,
        "device": device,
        "cpu_allocator": cpu_allocator(),
    }


def cpu_allocator() -> str:
    """How torch's CPU allocator gets large blocks: the one knob that decides page-fault costs.

    torch frees large blocks back to the OS, so every call that allocates a
    large fresh output pays ~4 KiB page faults; THP_MEM_ALLOC_ENABLE=1 (read
    once, when torch first allocates) makes it ask for huge pages instead.
    """
    return "thp" if os.environ.get("THP_MEM_ALLOC_ENABLE", "0") == "1" else "default"
