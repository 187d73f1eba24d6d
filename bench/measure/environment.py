"""The environment recorded in every report row: what a reader needs to reproduce or distrust a number."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime

import torch

from bench.measure import hardware
from bench.measure.allocator import cpu_allocator, malloc_policy
from bench.measure.machine import cpu_power, transparent_huge_pages
from env.builder.toolchain import cpu_model, package_version
from env.paths import toolchain_record_path
from env.repo import git_commit


def _toolchain() -> dict:
    path = toolchain_record_path()
    return json.loads(path.read_text()) if path.exists() else {}


def utc_timestamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def environment_columns(threads: int, device: str, timestamp: str, precision: float | None = None) -> dict[str, object]:
    record = _toolchain()
    abi = record.get("build", {}).get("cxx11_abi")
    return {
        "timestamp_utc": timestamp,
        "host": socket.gethostname(),
        "git_commit": git_commit(),
        "torch": torch.__version__,
        "onnxruntime": package_version("onnxruntime") or "not installed",
        "onnx": package_version("onnx") or "not installed",
        "compiler": record.get("compiler", {}).get("version") or "unknown (no build/toolchain.json)",
        "cxx11_abi": str(abi) if abi is not None else f"unknown (torch: {int(torch.compiled_with_cxx11_abi())})",
        "cpu_model": cpu_model(),
        "threads": threads,
        "device": device,
        "cpu_allocator": cpu_allocator(),
        "malloc_policy": malloc_policy(),
        "precision_target": float("nan") if precision is None else precision,
        "thp": transparent_huge_pages(),
        **cpu_power().columns(),
        **machine_columns(device),
    }


def machine_columns(device: str) -> dict[str, str]:
    """The hardware facts of a row on ``device`` (bench/hardware.py) and the machine id made from them."""
    facts = {**hardware.cpu_facts(), "gpu_model": hardware.gpu_model(device)}
    return {**facts, "machine_id": hardware.machine_id(facts)}
