"""The hardware facts that tell machines apart, and the machine id made from them.

A VM image bakes one /etc/machine-id into every VM made from it, and such a VM
may name its CPU "AMD EPYC" whatever its generation: a Zen 4 VM and a Zen 5 VM
of one image had the same machine id and CPU name, and reports of the two read
as one machine's. What differs between them is what the CPU says of itself
(vendor, family, model, stepping, microcode and its feature flags, in
/proc/cpuinfo), its caches (sysfs), the hypervisor, the memory and, on GPU
rows, the GPU. Each is a report column that `bench.compare` compares; the
machine id is a hash of them all with /etc/machine-id.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from bench.measure.machine import MACHINE_ID_ENV, NOT_EXPOSED

_CPUINFO = Path("/proc/cpuinfo")
_MEMINFO = Path("/proc/meminfo")
_CPU0_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
_DMI = Path("/sys/class/dmi/id")
_HYPERVISOR_TYPE = Path("/sys/hypervisor/type")
_MACHINE_ID_FILES = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))

# (column, /proc/cpuinfo field) of the CPU's identity.
CPUINFO_FIELDS = (
    ("cpu_vendor", "vendor_id"),
    ("cpu_family", "cpu family"),
    ("cpu_model_number", "model"),
    ("cpu_stepping", "stepping"),
    ("cpu_microcode", "microcode"),
)
# The hardware facts of every row, in column order (gpu_model is the GPU rows' own).
CPU_FACT_COLUMNS = (
    *(column for column, _ in CPUINFO_FIELDS),
    "cpu_caches",
    "cpu_flags_hash",
    "hypervisor",
    "memory_gib",
)
HARDWARE_COLUMNS = (*CPU_FACT_COLUMNS, "gpu_model")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def first_cpu(cpuinfo: str) -> dict[str, str]:
    """The fields of /proc/cpuinfo's first processor block."""
    fields = {}
    for line in cpuinfo.split("\n\n", 1)[0].splitlines():
        name, _, value = line.partition(":")
        fields[name.strip()] = value.strip()
    return fields


def cache_sizes(cache_dir: Path = _CPU0_CACHE) -> str:
    """The first CPU's caches by level, e.g. "L1d 32K, L1i 32K, L2 1024K, L3 32768K"; NOT_EXPOSED without sysfs."""
    caches = []
    for index in sorted(cache_dir.glob("index*")):
        level, kind, size = (_read(index / name) for name in ("level", "type", "size"))
        if level and size:
            suffix = {"Data": "d", "Instruction": "i"}.get((kind or "").strip(), "")
            caches.append(f"L{level.strip()}{suffix} {size.strip()}")
    return ", ".join(sorted(caches)) or NOT_EXPOSED


def hypervisor(flags: list[str], dmi: Path = _DMI, hypervisor_type: Path = _HYPERVISOR_TYPE) -> str:
    """ "none" on bare metal (no hypervisor CPU flag), else what the platform names (DMI vendor and product)."""
    if "hypervisor" not in flags:
        return "none"
    named = [(_read(dmi / name) or "").strip() for name in ("sys_vendor", "product_name")]
    named.append((_read(hypervisor_type) or "").strip())
    named = [n for n in dict.fromkeys(named) if n]
    return " ".join(named) if named else f"yes ({NOT_EXPOSED})"


def memory_gib(meminfo: str | None) -> str:
    """MemTotal in whole GiB (the kernel's own reservation moves it by megabytes between kernels)."""
    for line in (meminfo or "").splitlines():
        if line.startswith("MemTotal:"):
            return str(round(int(line.split()[1]) / 2**20))
    return NOT_EXPOSED


def cpu_facts(
    cpuinfo: Path = _CPUINFO, cache_dir: Path = _CPU0_CACHE, meminfo: Path = _MEMINFO, dmi: Path = _DMI
) -> dict[str, str]:
    """The CPU-side hardware facts (CPU_FACT_COLUMNS), each NOT_EXPOSED where the machine hides it."""
    fields = first_cpu(_read(cpuinfo) or "")
    flags = sorted(set(fields.get("flags", fields.get("Features", "")).split()))
    facts = {column: fields.get(name) or NOT_EXPOSED for column, name in CPUINFO_FIELDS}
    facts["cpu_caches"] = cache_sizes(cache_dir)
    facts["cpu_flags_hash"] = hashlib.sha256(" ".join(flags).encode()).hexdigest()[:16] if flags else NOT_EXPOSED
    facts["hypervisor"] = hypervisor(flags, dmi)
    facts["memory_gib"] = memory_gib(_read(meminfo))
    return facts


def gpu_model(device: str) -> str:
    """A CUDA device's model facts without its UUID: name, compute capability, memory, SMs and the driver."""
    if device == "cpu":
        return ""
    import torch

    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    facts = [
        props.name,
        f"sm_{props.major}{props.minor}",
        f"{props.total_memory / 2**30:.0f} GiB",
        f"{props.multi_processor_count} SMs",
        f"driver {_driver_version()}",
    ]
    return ", ".join(facts)


def _driver_version() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - NVML absent or broken: say so, the rest of the facts stand
        return NOT_EXPOSED
    return version.decode() if isinstance(version, bytes) else str(version)


def machine_id(facts: dict[str, str], files: tuple[Path, ...] = _MACHINE_ID_FILES) -> str:
    """A hash of the hardware facts with /etc/machine-id (never the id itself); $FUSEDBENCH_MACHINE_ID overrides.

    Two VMs of one image share /etc/machine-id; their hardware facts tell them
    apart. Two machines of one kind share the facts; the id file tells them apart.
    """
    if given := os.environ.get(MACHINE_ID_ENV, "").strip():
        return given
    system_id = next((text.strip() for path in files if (text := _read(path)) and text.strip()), "unknown")
    text = json.dumps({"facts": facts, "machine-id": system_id}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
