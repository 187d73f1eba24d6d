"""ptxas's resource report (``nvcc --resource-usage``): parsed per kernel, summarised, printed as a table.

Each kernel's registers, barriers, shared/constant memory, stack frame and
spills, per machine-code target, as ptxas writes them for the CUDA compile
check (env/builder/cuda.py).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class PtxasReportError(RuntimeError):
    """ptxas's output does not have the expected lines; the message names the kernels."""


@dataclass(frozen=True)
class KernelResources:
    kernel: str  # readable name, e.g. "warp_rows_kernel<BFloat16, 8, 2>"
    mangled: str
    arch: str
    registers: int
    barriers: int
    shared_bytes: int
    constant_bytes: int
    stack_frame_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")


def parse_ptxas_report(text: str) -> list[tuple[str, str, dict[str, int]]]:
    """(mangled name, arch, numbers) per kernel from ``ptxas -v`` output."""
    kernels: list[tuple[str, str, dict[str, int]]] = []
    current: tuple[str, str, dict[str, int]] | None = None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            current = (m.group(1), m.group(2), {})
            kernels.append(current)
        elif current is None:
            continue
        elif m := _FRAME.search(line):
            current[2].update(
                stack_frame_bytes=int(m.group(1)), spill_store_bytes=int(m.group(2)), spill_load_bytes=int(m.group(3))
            )
        elif m := _USED.search(line):
            numbers = current[2]
            numbers["registers"] = int(m.group(1))
            numbers["barriers"] = _field(line, r"used (\d+) barriers")
            numbers["shared_bytes"] = _field(line, r"(\d+) bytes smem")
            numbers["constant_bytes"] = _field(line, r"(\d+) bytes cmem\[0\]")
    missing = [name for name, _, numbers in kernels if "registers" not in numbers or "spill_store_bytes" not in numbers]
    if missing:
        raise PtxasReportError(f"ptxas report incomplete for {missing[:3]} (format changed?)")
    return kernels


def _field(line: str, pattern: str) -> int:
    m = re.search(pattern, line)
    return int(m.group(1)) if m else 0


def demangle(names: list[str]) -> list[str]:
    """Readable names via c++filt (binutils); the mangled ones where it is missing."""
    cxxfilt = shutil.which("c++filt")
    if cxxfilt is None or not names:
        return list(names)
    out = subprocess.run([cxxfilt], input="\n".join(names) + "\n", capture_output=True, text=True, check=False)
    lines = out.stdout.splitlines()
    return lines if out.returncode == 0 and len(lines) == len(names) else list(names)


def short_kernel_name(demangled: str) -> str:
    """'void fused_norm::cuda_kernels::warp_rows_kernel<fused_norm::BFloat16, 8, 2>(...)'
    -> 'warp_rows_kernel<BFloat16, 8, 2>'."""
    name = demangled.split("(", 1)[0]
    name = name.removeprefix("void ").replace("fused_norm::cuda_kernels::", "").replace("fused_norm::", "")
    return name


def summarise(kernels: list[KernelResources], machine_targets: list[str]) -> dict[str, Any]:
    spilling = sorted({f"{k.kernel} [{k.arch}]" for k in kernels if k.spill_store_bytes or k.spill_load_bytes})
    return {
        "kernels": len({k.kernel for k in kernels}),
        "machine_code_targets": machine_targets,
        "max_registers": {a: max((k.registers for k in kernels if k.arch == a), default=0) for a in machine_targets},
        "max_shared_bytes": max((k.shared_bytes for k in kernels), default=0),
        "max_stack_frame_bytes": max((k.stack_frame_bytes for k in kernels), default=0),
        "spilling_kernels": spilling,
    }


def format_table(report: dict[str, Any]) -> str:
    """One line per kernel: registers / shared memory / spills for each machine-code target."""
    archs = report["summary"]["machine_code_targets"]
    by_kernel: dict[str, dict[str, dict[str, Any]]] = {}
    for k in report["kernels"]:
        by_kernel.setdefault(k["kernel"], {})[k["arch"]] = k
    width = max(len(name) for name in by_kernel)
    header = f"{'kernel'.ljust(width)}  " + "  ".join(f"{a + ' regs/smem/spill':>22}" for a in archs)
    lines = [header]
    for name in sorted(by_kernel):
        cells = []
        for arch in archs:
            k = by_kernel[name].get(arch)
            cell = (
                f"{k['registers']}/{k['shared_bytes']}/{k['spill_store_bytes'] + k['spill_load_bytes']}"
                if k
                else "missing"
            )
            cells.append(f"{cell:>22}")
        lines.append(f"{name.ljust(width)}  " + "  ".join(cells))
    return "\n".join(lines)


def describe(entry: dict[str, Any]) -> str:
    """One line for the record's ``cuda_resource_report`` entry: targets, kernels, registers, spills, adapters."""
    if entry.get("status") != "compiled":
        return f"{entry.get('status', 'not run')} ({entry.get('reason', 'no reason recorded')})"
    summary = entry["summary"]
    registers = ", ".join(f"{arch} {n}" for arch, n in summary["max_registers"].items())
    spills = summary["spilling_kernels"]
    adapters = ", ".join(f"{name} {status}" for name, status in sorted(entry.get("adapters", {}).items()))
    return (
        f"{', '.join(entry['targets'])}: {summary['kernels']} kernels, max registers {registers}, "
        f"{'spills in ' + ', '.join(spills) if spills else 'no spills'}; adapters: {adapters or 'none'}"
    )


def report_table(entry: dict[str, Any]) -> str | None:
    """The ptxas table of the report the record's entry points at (None when there is none)."""
    path = Path(entry.get("json", "")) if entry.get("json") else None
    if path is None or not path.is_file():
        return None
    return format_table(json.loads(path.read_text()))
